//! The gateway's `refresh_pattern_example`: bridle-memory's tool of that name (same name,
//! description, schema and gate), run through the gateway's index-run registry.
//!
//! bridle-memory's own tool knows nothing of the admin API's runs, so a refresh over MCP could
//! run beside an index the panel started for the same tag. The gateway puts this one in its
//! place: it claims the tag in [`IndexRuns`] first (a tag being indexed answers an error
//! result with code `index_running` and the run's id, one whose example is being removed
//! `example_removing`), records each step in the run, so the
//! panel and the admin API can follow a refresh an agent started, and ends the run with `done`
//! or `error`. Progress notifications to the caller, the `last_indexed` write-back and the
//! indexing gauges (the [`IndexListener`]) work as in bridle-memory's tool.

use std::sync::Arc;

use async_trait::async_trait;
use bridle_memory::tools::IndexListener;
use bridle_memory::{MemoryError, PatternIndex, Progress, ProgressEvent};
use kberg_core::{CoreError, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use super::runs::{Claimed, IndexRuns, RunEventKind, RunHandle, RunOrigin, RunStart, report_event};

/// The tool's name.
pub const REFRESH_TOOL: &str = "refresh_pattern_example";

#[derive(Deserialize)]
struct RefreshArgs {
    reference_tag: String,
}

/// The tool, over the registry's runs.
pub(crate) struct RegisteredRefresh {
    spec: ToolSpec,
    patterns: Arc<PatternIndex>,
    listener: Option<Arc<dyn IndexListener>>,
    runs: IndexRuns,
}

/// Replaces bridle-memory's `refresh_pattern_example` in `registry` (registered there by
/// `bridle_memory::tools::register`) with the gateway's, keeping its spec. Does nothing when
/// the registry has no such tool.
pub(crate) fn replace_refresh_tool(
    registry: &ToolRegistry,
    patterns: Arc<PatternIndex>,
    listener: Option<Arc<dyn IndexListener>>,
    runs: IndexRuns,
) -> Result<(), CoreError> {
    let Some(spec) = registry.spec(REFRESH_TOOL) else {
        return Ok(());
    };
    registry.remove(REFRESH_TOOL);
    registry.register(RegisteredRefresh {
        spec,
        patterns,
        listener,
        runs,
    })
}

/// A refresh's progress: to the caller, to the listener and into the run.
struct RunProgress<'a> {
    ctx: &'a ToolContext,
    tag: &'a str,
    listener: Option<&'a Arc<dyn IndexListener>>,
    run: &'a RunHandle,
}

#[async_trait]
impl Progress for RunProgress<'_> {
    async fn report(&self, event: ProgressEvent) {
        self.run.progress(&event);
        if let Some(l) = self.listener {
            l.progress(self.tag, &event).await;
        }
        let (done, total) = event.mcp_progress();
        if let Err(e) = self.ctx.progress(done, total, Some(&event.message())).await {
            tracing::debug!(error = %e, "progress notification not delivered");
        }
    }
}

fn failure(e: &MemoryError) -> ToolOutput {
    ToolOutput::error_with(
        e.to_string(),
        json!({"code": e.code(), "message": e.to_string()}),
    )
}

#[async_trait]
impl Tool for RegisteredRefresh {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let a: RefreshArgs = serde_json::from_value(args)
            .map_err(|e| ToolError::failed(format!("bad arguments: {e}")))?;
        let tag = a.reference_tag;
        let run = match self.runs.start(RunStart {
            reference_tag: tag.clone(),
            project: None,
            pattern: None,
            origin: RunOrigin::Tool,
            actor: ctx.caller().principal().id.clone(),
        }) {
            Ok(run) => run,
            Err(claimed) => {
                let message = claimed.to_string();
                let mut data = json!({"code": claimed.code(), "message": message});
                if let Claimed::Indexing(busy) = &claimed {
                    data["run_id"] = json!(busy.run_id);
                }
                return Ok(ToolOutput::error_with(message, data));
            }
        };
        let progress = RunProgress {
            ctx: &ctx,
            tag: &tag,
            listener: self.listener.as_ref(),
            run: &run,
        };
        match self.patterns.refresh(&tag, &progress).await {
            Ok(report) => {
                if let Some(l) = &self.listener {
                    l.indexed(&report).await;
                }
                run.finish(RunEventKind::Done, json!({"report": report_event(&report)}));
                let text = format!(
                    "Re-indexed `{}`: {} chunks from {} files (replaced {}), last_indexed {}.",
                    report.reference_tag,
                    report.chunks,
                    report.files,
                    report.replaced,
                    report.last_indexed
                );
                Ok(ToolOutput::text(text).with_structured(json!({"report": report})))
            }
            Err(e) => {
                if let Some(l) = &self.listener {
                    l.failed(&tag, &e).await;
                }
                tracing::warn!(tag = %tag, code = e.code(), "refreshing an example failed; the previous index is kept");
                run.finish(
                    RunEventKind::Error,
                    json!({"code": e.code(), "detail": "the refresh failed; the previous index is kept"}),
                );
                Ok(failure(&e))
            }
        }
    }
}
