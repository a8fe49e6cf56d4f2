//! `prompts/get` and `completion/complete`: string arguments only, the prompt rendered with
//! the request's client channel (a prompt may ask the client, as a tool may), and its wire
//! answer per generation.

use kberg_core::{CallOptions, Caller, PromptArgs, PromptError};
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse, Reference,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use super::KbergHandler;
use super::errors::prompt_error;
use crate::convert;

impl KbergHandler {
    /// Renders a prompt for `prompts/get`.
    pub(super) async fn render_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let mut context = context;
        let caller = Caller::new(self.principal(&context)?);
        let mut args = PromptArgs::new();
        for (k, v) in request.arguments.unwrap_or_default() {
            match v {
                Value::String(s) => {
                    args.insert(k, s);
                }
                // The client's key and value are not quoted back whole: either may be
                // megabytes long. The key is cut, the value described in a few words.
                other => {
                    let key = super::errors::cut(k, MAX_ARGUMENT_NAME_CHARS);
                    return Err(McpError::invalid_params(
                        format!(
                            "prompt argument `{key}` must be a string, got {}",
                            kberg_core::describe_value(&other)
                        ),
                        None,
                    ));
                }
            }
        }
        let (peer, round_trip, answers) = self.client_peer(
            &context,
            request.request_state.as_deref(),
            request.input_responses.as_ref(),
        )?;
        let mut opts = CallOptions::with_cancel(context.ct.clone()).with_peer(peer);
        if let Some(origin) = self.call_origin(&context) {
            opts = opts.with_origin(origin);
        }
        if let Some(token) = context
            .meta
            .get_progress_token()
            .and_then(|t| serde_json::to_value(t).ok())
        {
            opts = opts.with_progress_token(token);
        }
        let meta_map = std::mem::take(&mut context.meta.0.0);
        if !meta_map.is_empty() {
            opts = opts.with_meta(Value::Object(meta_map));
        }
        let rendered = self
            .shared
            .app
            .prompts()
            .get_with(&caller, &request.name, args, opts)
            .await;
        match (rendered, round_trip) {
            (Ok(r), _) => Ok(convert::prompt_result(&r)?.into()),
            (Err(PromptError::InputRequired { requests, prompt }), Some(p)) => {
                Ok(Self::input_required(&p, requests, &answers, &prompt)?.into())
            }
            // 2026-07-28 (SEP-2575): as for tools, a prompt that needs a capability the
            // request did not declare is a protocol error naming the capability.
            (Err(e @ PromptError::Failed { .. }), Some(p)) => match p.missing_capability() {
                Some(cap) => Err(McpError::missing_required_client_capability(
                    convert::from_json("client capabilities", json!({ cap: {} }))?,
                )),
                None => Err(prompt_error(e)),
            },
            (Err(e), _) => Err(prompt_error(e)),
        }
    }

    /// Completion values for `completion/complete`.
    pub(super) async fn completion(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.principal(&context)?;
        let values = match &request.r#ref {
            Reference::Prompt(p) => self
                .shared
                .app
                .prompts()
                .complete(&p.name, &request.argument.name, &request.argument.value)
                .map_err(prompt_error)?,
            // Resource templates declare no completion values in kberg-core.
            _ => Vec::new(),
        };
        let total = values.len();
        convert::from_json(
            "a completion",
            json!({"resultType": "complete", "completion": {"values": values, "total": total, "hasMore": false}}),
        )
    }
}

/// The longest prompt argument name quoted in an error, in characters.
const MAX_ARGUMENT_NAME_CHARS: usize = 64;
