//! The gateway's errors: why it could not be assembled ([`GatewayError`]), and the stable codes
//! of the refusals an agent can receive from the gateway's own tools ([`RefusalCode`]).
//!
//! Every refusal an agent sees has one shape, whatever part of the gateway produced it: an
//! `isError` tool result whose structured content is `{"code", "message", "tool", "retryable"}`,
//! the same shape kberg-core's gate uses for its own [`kberg_core::ErrorCode`]s
//! ([`kberg_core::Refusal`]). Codes that come from the rules store
//! ([`bridle_rules::RulesError::code`]) travel in the same shape.
//!
//! The refusal helpers ([`refusal`], [`rules_refusal`], the Kanboard tools' own) are called deep
//! inside a tool's work, where the tool's name is not at hand, so they leave `tool` out; every
//! gateway tool is registered wrapped in [`NamedRefusals`], which adds the name the agent
//! called to each refusal that does not carry one yet.

use std::sync::Arc;

use async_trait::async_trait;
use bridle_rules::RulesError;
use kberg_core::{AsyncHandler, SyncHandler, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};

use crate::config::ConfigError;

/// The sentence for a blocking task that ended without an answer (it panicked, or the runtime
/// was shutting down), to put in whatever error the caller answers with. The task's own words
/// are logged by kind only and never quoted: a panic's message may repeat the data it failed on
/// (a string slicing panic quotes the string), and that data may be an argument, a token or a
/// secret's value, which must reach neither an answer nor a log line.
pub(crate) fn task_failed(what: &str, e: &tokio::task::JoinError) -> String {
    tracing::error!(
        task = what,
        panicked = e.is_panic(),
        "a blocking task ended without an answer"
    );
    format!("{what} stopped unexpectedly (internal error); see the gateway's log")
}

/// Why the gateway could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Configuration or secrets.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The rules store.
    #[error(transparent)]
    Rules(#[from] RulesError),
    /// Registering tools or resources.
    #[error("registering the gateway's tools failed: {0}")]
    Register(#[from] kberg_core::CoreError),
    /// The vault (its master key, its database).
    #[error(transparent)]
    Vault(#[from] crate::vault::VaultError),
    /// The audit log could not be opened.
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    /// Listening or serving failed.
    #[error("{0}")]
    Serve(String),
}

/// The stable codes of the refusals the gateway's tools answer with, beside kberg-core's
/// [`kberg_core::ErrorCode`]s (which the gate answers with) and the rules store's codes.
///
/// The string form ([`RefusalCode::as_str`]) is the contract: it never changes meaning.
///
/// | code | meaning | retry? |
/// |---|---|---|
/// | `unknown_agent` | the caller is not a configured agent (its token was revoked, or the configuration changed) | no |
/// | `project_not_allowed` | the agent is not configured for that project (an agent never learns whether such a project exists) | no |
/// | `capability_required` | the agent's type lacks the permission for this action in this project | no |
/// | `not_found` | no such item among the caller's own (a ticket another agent opened is reported missing) | no |
/// | `credential_missing` | the upstream's credential mapping resolves to no secret for this agent (none mapped, or the secret is missing, empty or revoked), or the version read as the call started was revoked or rotated out with no grace before its use was recorded; nothing was sent | no (`retryable: false`), but see below |
/// | `upstream_disabled` | the upstream is disabled by an operator | later |
/// | `internal` | the gateway failed; the log has the details | maybe |
///
/// `credential_missing` answers `retryable: false`, as the same call does not succeed later on
/// its own while no secret is mapped or the secret stays revoked. One case of it does: when the
/// version read as the call started was rotated out by a rotation with no grace (`rotate` with
/// a zero grace) before its use was recorded, the secret still has an active version, and the
/// same call made again reads and sends it (`tests/upstream_use_after_revoke.rs`). Its message
/// says so ("revoked or rotated out as the call started"), so a client that sees it may try
/// once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalCode {
    /// The caller is not a configured agent.
    UnknownAgent,
    /// The agent is not configured for that project.
    ProjectNotAllowed,
    /// The agent's type lacks the permission for this action in this project.
    CapabilityRequired,
    /// No such item among the caller's own.
    NotFound,
    /// The upstream's credential mapping resolves to no secret for this agent.
    CredentialMissing,
    /// The upstream is disabled.
    UpstreamDisabled,
    /// The gateway failed.
    Internal,
}

impl RefusalCode {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            RefusalCode::UnknownAgent => "unknown_agent",
            RefusalCode::ProjectNotAllowed => "project_not_allowed",
            RefusalCode::CapabilityRequired => "capability_required",
            RefusalCode::NotFound => "not_found",
            RefusalCode::CredentialMissing => "credential_missing",
            RefusalCode::UpstreamDisabled => "upstream_disabled",
            RefusalCode::Internal => "internal",
        }
    }

    /// Whether the same call may succeed later without changes.
    pub const fn is_retryable(self) -> bool {
        matches!(self, RefusalCode::UpstreamDisabled | RefusalCode::Internal)
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal in the one shape agents see: an error result with a sentence and
/// `{"code", "message", "retryable"}` as structured content; the tool's [`NamedRefusals`]
/// adds `tool`.
pub fn refusal(code: RefusalCode, message: impl Into<String>) -> ToolOutput {
    shaped(code.as_str(), code.is_retryable(), message.into())
}

/// The rules store's refusal, in the same shape (its code from [`RulesError::code`], but
/// `unknown_agent_type` for an agent type it cannot render for); the
/// tool's [`NamedRefusals`] adds `tool`.
pub fn rules_refusal(e: &RulesError) -> ToolOutput {
    let code = match e {
        // The store's `unknown_agent` is an agent type it cannot render for; to an agent,
        // `unknown_agent` says that it itself is no longer a configured agent. The admin API
        // says `unknown_agent_type` too.
        RulesError::UnknownAgent { .. } => "unknown_agent_type",
        other => other.code(),
    };
    shaped(code, false, e.to_string())
}

fn shaped(code: &str, retryable: bool, message: String) -> ToolOutput {
    ToolOutput::error_with(
        message.clone(),
        json!({"code": code, "message": message, "retryable": retryable}),
    )
}

/// `out` with `tool` named in its structured content when it is a refusal (an error result
/// whose structured content has a `code`) that names no tool yet. Anything else is returned
/// as it is.
pub(crate) fn naming_tool(mut out: ToolOutput, tool: &str) -> ToolOutput {
    if out.is_error
        && let Some(Value::Object(details)) = out.structured.as_mut()
        && details.contains_key("code")
        && !details.contains_key("tool")
    {
        details.insert("tool".into(), Value::String(tool.to_string()));
    }
    out
}

/// A gateway tool registered so that its refusals name it: each refusal it answers (an error
/// result whose structured content has a `code`) without a `tool` gets the tool's registered
/// name, the one the agent called. The tool runs as it would unwrapped (synchronous, detached
/// or not).
pub struct NamedRefusals<T> {
    tool: T,
    name: Arc<str>,
}

impl<T: Tool> NamedRefusals<T> {
    /// `tool`, whose refusals will name it.
    pub fn new(tool: T) -> Self {
        let name = Arc::from(tool.spec().name);
        Self { tool, name }
    }
}

impl<T> std::fmt::Debug for NamedRefusals<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedRefusals")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<T: Tool> Tool for NamedRefusals<T> {
    fn spec(&self) -> ToolSpec {
        self.tool.spec()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let out = self.tool.call(args, ctx).await?;
        Ok(naming_tool(out, &self.name))
    }

    fn synchronous(&self) -> Option<SyncHandler> {
        let body = self.tool.synchronous()?;
        let name = Arc::clone(&self.name);
        Some(Arc::new(move |args, ctx| {
            body(args, ctx).map(|out| naming_tool(out, &name))
        }))
    }

    fn detached(&self) -> Option<AsyncHandler> {
        let body = self.tool.detached()?;
        let name = Arc::clone(&self.name);
        Some(Arc::new(move |args, ctx| {
            let run = body(args, ctx);
            let name = Arc::clone(&name);
            Box::pin(async move { run.await.map(|out| naming_tool(out, &name)) })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message a panic may carry: the data a slicing panic quotes, say.
    const CANARY: &str = "canary-panic-payload-41c9";

    /// Before, the admin API's blocking helper answered `a store task failed: task N panicked
    /// with message "..."`, the panic's own words in the problem's `detail`.
    #[tokio::test]
    async fn an_admin_store_task_that_panics_answers_without_its_message() {
        let e =
            crate::admin::blocking(|| -> Result<(), crate::admin::ApiError> { panic!("{CANARY}") })
                .await
                .expect_err("the task panicked");
        let problem = e.problem();
        assert_eq!(problem.status, 500);
        assert_eq!(problem.code, "internal");
        assert!(!problem.detail.contains(CANARY), "{}", problem.detail);
        assert!(
            problem.detail.contains("internal error"),
            "{}",
            problem.detail
        );
    }

    /// Before, the gateway's tools answered the agent `internal error: task N panicked with
    /// message "..."`.
    #[tokio::test]
    async fn a_tool_store_task_that_panics_tells_the_agent_nothing_of_its_message() {
        let e = crate::tools::blocking(|| -> () { panic!("{CANARY}") })
            .await
            .expect_err("the task panicked");
        let told = e.to_string();
        assert!(!told.contains(CANARY), "{told}");
        assert!(told.contains("internal error"), "{told}");
    }

    #[test]
    fn every_refusal_has_the_one_shape() {
        for code in [
            RefusalCode::UnknownAgent,
            RefusalCode::ProjectNotAllowed,
            RefusalCode::CapabilityRequired,
            RefusalCode::NotFound,
            RefusalCode::CredentialMissing,
            RefusalCode::UpstreamDisabled,
            RefusalCode::Internal,
        ] {
            let out = refusal(code, "why");
            assert!(out.is_error);
            let s = out.structured.as_ref().expect("structured content");
            assert_eq!(s["code"], code.as_str());
            assert_eq!(s["message"], "why");
            assert_eq!(s["retryable"], code.is_retryable());
        }
    }
}
