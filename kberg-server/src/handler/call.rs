//! `tools/call`: the per-principal call limit, running as a task when the tool supports it and
//! the client declared the extension, the gate call with the request's client channel,
//! progress token, `_meta` and client info, and the wire answer of the result (a result, an
//! `isError` refusal, `-32602` for an unknown tool, `input_required` or `-32021` on
//! 2026-07-28).

use std::collections::BTreeMap;
use std::sync::Arc;

use kberg_core::{
    CallOptions, Caller, ErrorCode, GateError, Refusal, Started, TaskSupport, ToolOutput,
};
use rmcp::model::{CallToolRequestParams, CallToolResponse, ClientCapabilities};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use super::KbergHandler;
use super::request::is_stateless;
use crate::convert;
use crate::peer::RoundTripPeer;

impl KbergHandler {
    pub(super) async fn call(
        &self,
        req: CallToolRequestParams,
        mut ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = self.caller(&ctx)?;
        let Some(_permit) = self.shared.calls.try_acquire(&caller.principal().id) else {
            let max = self.shared.calls.max();
            // The name is the client's, not yet looked up: quoted as the gate quotes one.
            let name = kberg_core::quoted_name(&req.name);
            let refusal = Refusal::new(
                ErrorCode::TooManyCalls,
                name.to_string(),
                format!(
                    "You already have {max} calls in flight. Wait for one to finish, then call `{name}` again."
                ),
            );
            return Ok(convert::refusal_result(&refusal).into());
        };
        // A tool with task support runs as a task when the client declared the extension
        // (a single lookup; tools without it pay nothing more).
        let task_support = self
            .shared
            .app
            .tools()
            .task_support(&req.name)
            .map(|(s, _)| s)
            .filter(|s| *s != TaskSupport::Forbidden);
        let as_task = task_support.is_some()
            && ctx
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
        if task_support == Some(TaskSupport::Required) && !as_task {
            return self.refuse_required_task(&caller, &req);
        }
        let progress_token = ctx
            .meta
            .get_progress_token()
            .and_then(|t| serde_json::to_value(t).ok());
        let (peer, round_trip, answers) = self.client_peer(
            &ctx,
            req.request_state.as_deref(),
            req.input_responses.as_ref(),
        )?;
        let origin = self.call_origin(&ctx);
        // The tool sees the request's `_meta`; move it rather than copy it.
        let meta_map = std::mem::take(&mut ctx.meta.0.0);
        let meta = (!meta_map.is_empty()).then_some(Value::Object(meta_map));
        let args = req.arguments.map(Value::Object).unwrap_or(Value::Null);
        let mut opts = CallOptions::with_cancel(ctx.ct.clone()).with_peer(peer);
        if let Some(token) = progress_token {
            opts = opts.with_progress_token(token);
        }
        if let Some(meta) = meta {
            opts = opts.with_meta(meta);
        }
        if let Some(origin) = origin {
            opts = opts.with_origin(origin);
        }
        let result = if as_task {
            // 2025-11-25 sessions get the task's status notifications on their stream.
            let notify = !is_stateless(&ctx);
            match self
                .shared
                .app
                .tasks()
                .start(&caller, &req.name, args, opts, notify)
                .await
            {
                Ok(Started::Task(s)) => {
                    return Ok(CallToolResponse::Task(crate::tasks::created(&s)?));
                }
                Ok(Started::Finished(r)) => r,
                Ok(_) => Err(GateError::ToolPanicked {
                    tool: req.name.to_string(),
                }),
                Err(e) => {
                    let refusal = crate::tasks::refusal(&e, &req.name);
                    return Ok(convert::refusal_result(&refusal).into());
                }
            }
        } else {
            self.shared
                .app
                .tools()
                .call(&caller, &req.name, args, opts)
                .await
        };
        Self::call_answer(result, round_trip, &answers)
    }

    /// A `required` task tool called by a client without the tasks extension: the gate's checks
    /// first (a caller who may not call the tool learns only that), then `-32021` naming the
    /// extension.
    pub(super) fn refuse_required_task(
        &self,
        caller: &Caller,
        req: &CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let args = req
            .arguments
            .clone()
            .map(Value::Object)
            .unwrap_or_else(|| json!({}));
        match self.shared.app.tools().check(caller, &req.name, &args) {
            Ok(_) => Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            )),
            Err(e) => Self::call_answer(Err(e), None, &BTreeMap::new()),
        }
    }

    /// The wire answer of a finished call.
    pub(super) fn call_answer(
        result: Result<ToolOutput, GateError>,
        round_trip: Option<Arc<RoundTripPeer>>,
        answers: &BTreeMap<String, Value>,
    ) -> Result<CallToolResponse, McpError> {
        match (result, round_trip) {
            (Ok(out), _) => Ok(convert::call_result(out)?.into()),
            (Err(e @ GateError::UnknownTool { .. }), _) => {
                Err(McpError::invalid_params(e.to_string(), Some(e.details())))
            }
            (Err(GateError::InputRequired { requests, tool }), Some(p)) => {
                Ok(Self::input_required(&p, requests, answers, &tool)?.into())
            }
            // 2026-07-28 (SEP-2575): a tool that needs a capability the request did not
            // declare is a protocol error naming the capability.
            (Err(e @ GateError::ToolFailed { .. }), Some(p)) => match p.missing_capability() {
                Some(cap) => Err(McpError::missing_required_client_capability(
                    convert::from_json("client capabilities", json!({ cap: {} }))?,
                )),
                None => Ok(convert::refusal_result(&e.refusal()).into()),
            },
            (Err(e), _) => Ok(convert::refusal_result(&e.refusal()).into()),
        }
    }
}
