//! Gate step 5a: preview and commit.
//!
//! A preview tool's call without a token runs as a dry run, and its output is wrapped with a
//! fresh commit token; a call with a token is checked first (a bad one is refused before a human
//! is bothered) and the token is spent at the last moment the call is decided. The tokens
//! themselves (random, single use, bound to tool, principal and argument digest) are kept by
//! [`CommitTokens`]; this module maps their verdicts onto the stable codes.

use crate::content::ToolOutput;
use crate::error::GateError;
use crate::preview::{
    CallPhase, CommitConfig, CommitTokens, Redeem, preview_output, token_fingerprint,
};

/// The stable refusal for a token verdict.
pub(crate) fn refusal(r: Redeem, tool: &str) -> GateError {
    let tool = tool.to_string();
    match r {
        Redeem::Invalid => GateError::CommitTokenInvalid { tool },
        Redeem::Used => GateError::CommitTokenUsed { tool },
        Redeem::Expired => GateError::CommitTokenExpired { tool },
        Redeem::ArgumentsChanged => GateError::CommitArgumentsChanged { tool },
    }
}

/// A call's preview / commit state, from the first check to the wrapped preview result.
pub(crate) struct CommitStep<'a> {
    pub(crate) tokens: &'a CommitTokens,
    pub(crate) tool: &'a str,
    pub(crate) principal: &'a str,
    /// The canonical digest of the arguments (empty for a tool that does not preview).
    pub(crate) digest: &'a str,
    /// The token the caller sent, when this call commits a preview.
    pub(crate) token: Option<&'a str>,
}

impl CommitStep<'_> {
    /// The phase of a fresh (not approved) call, checking a sent token without spending it.
    /// Sets `fingerprint` to the token's audit fingerprint when one was sent.
    pub(crate) fn phase(
        &self,
        previews: bool,
        fingerprint: &mut Option<String>,
    ) -> Result<CallPhase, GateError> {
        match (previews, self.token) {
            (false, _) => Ok(CallPhase::Direct),
            (true, None) => Ok(CallPhase::Preview),
            (true, Some(token)) => {
                *fingerprint = Some(token_fingerprint(token));
                self.tokens
                    .check(token, self.tool, self.principal, self.digest)
                    .map_err(|r| refusal(r, self.tool))?;
                Ok(CallPhase::Commit)
            }
        }
    }

    /// Spends the token of a committing call (a no-op for any other call). Atomic: of two
    /// concurrent commits of one token exactly one gets through.
    pub(crate) fn spend(&self) -> Result<(), GateError> {
        match self.token {
            Some(token) => self
                .tokens
                .redeem(token, self.tool, self.principal, self.digest)
                .map_err(|r| refusal(r, self.tool)),
            None => Ok(()),
        }
    }

    /// Wraps a preview's output with a new commit token. Sets `fingerprint` to the new token's.
    pub(crate) fn issue(
        &self,
        out: ToolOutput,
        config: &CommitConfig,
        fingerprint: &mut Option<String>,
    ) -> Result<ToolOutput, GateError> {
        let (token, expires_at) = self
            .tokens
            .issue(self.tool, self.principal, self.digest, config)
            .map_err(|e| {
                tracing::error!(error = %e, "no randomness for a commit token");
                GateError::ToolFailed {
                    tool: self.tool.to_string(),
                    message: "a commit token could not be issued (internal error)".into(),
                }
            })?;
        *fingerprint = Some(token_fingerprint(&token));
        Ok(preview_output(out, self.tool, &token, expires_at))
    }
}
