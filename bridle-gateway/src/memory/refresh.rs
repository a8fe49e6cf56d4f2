//! The gateway's `refresh_pattern_example`: bridle-memory's tool of that name (same name,
//! description, schema and gate), run through the gateway's index-run registry.
//!
//! bridle-memory's own tool knows nothing of the admin API's runs, so a refresh over MCP could
//! run beside an index the panel started for the same tag. The gateway puts this one in its
//! place: it claims the tag in [`IndexRuns`] first (a tag being indexed answers a refusal
//! with code `index_running`, retryable, and the run's id, one whose example is being removed
//! `example_removing`, not retryable), records each step in the run, so the
//! panel and the admin API can follow a refresh an agent started, and ends the run with `done`
//! or `error`. Progress notifications to the caller, the `last_indexed` write-back and the
//! indexing gauges (the [`IndexListener`]) work as in bridle-memory's tool.
//!
//! The source is read from the project documents, as the admin API's index reads it: the
//! example's URL as the operator wrote it, with any credential it carries, since bridle-memory
//! keeps only the redacted form with the chunks. A tag no document lists (indexed some other
//! way) is refreshed from the source bridle-memory recorded.

use crate::logging::one_line;
use std::sync::Arc;

use async_trait::async_trait;
use bridle_memory::tools::IndexListener;
use bridle_memory::{ExampleRepo, PatternIndex, Progress, ProgressEvent};
use kberg_core::{CoreError, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::context::GatewayContext;
use crate::error::NamedRefusals;

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
    ctx: Arc<GatewayContext>,
}

/// Replaces bridle-memory's `refresh_pattern_example` in `registry` (registered there from
/// `bridle_memory::tools::tools`) with the gateway's, keeping its spec and registered, as
/// every gateway tool is, in [`NamedRefusals`]. Does nothing when the registry has no such
/// tool.
pub(crate) fn replace_refresh_tool(
    registry: &ToolRegistry,
    patterns: Arc<PatternIndex>,
    listener: Option<Arc<dyn IndexListener>>,
    runs: IndexRuns,
    ctx: Arc<GatewayContext>,
) -> Result<(), CoreError> {
    let Some(spec) = registry.spec(REFRESH_TOOL) else {
        return Ok(());
    };
    registry.remove(REFRESH_TOOL);
    registry.register(NamedRefusals::new(RegisteredRefresh {
        spec,
        patterns,
        listener,
        runs,
        ctx,
    }))
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
            tracing::debug!(error = %one_line(&e), "progress notification not delivered");
        }
    }
}

/// The example of `tag` as the first project document that lists it has it (its URL as
/// written), or `None` when no readable document lists it.
fn listed_example(ctx: &GatewayContext, tag: &str) -> Option<ExampleRepo> {
    let projects = match ctx.store.projects() {
        Ok(projects) => projects,
        Err(e) => {
            tracing::warn!(error = %one_line(&e), "project rules unreadable; refreshing from the recorded source");
            return None;
        }
    };
    for project in projects {
        let doc = match ctx.store.load(&project) {
            Ok(loaded) => loaded.document,
            Err(e) => {
                tracing::warn!(project = ?project, error = %one_line(&e), "project rules unreadable; its examples are not looked at");
                continue;
            }
        };
        if let Some(r) = doc
            .patterns
            .custom
            .iter()
            .flat_map(|p| &p.example_repos)
            .find(|r| r.reference_tag == tag)
        {
            return Some(ExampleRepo {
                url: r.url.clone(),
                reference_tag: r.reference_tag.clone(),
                arch_tag: r.arch_tag.clone(),
            });
        }
    }
    None
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
                // A tag being indexed is free again once that run ends; one whose example is
                // being removed is gone then.
                let retryable = matches!(claimed, Claimed::Indexing(_));
                let message = claimed.to_string();
                let mut data = json!({
                    "code": claimed.code(),
                    "message": message,
                    "tool": REFRESH_TOOL,
                    "retryable": retryable,
                });
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
        let ctx_ = Arc::clone(&self.ctx);
        let t = tag.clone();
        let listed = tokio::task::spawn_blocking(move || listed_example(&ctx_, &t))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %one_line(&e), "looking up an example in the project rules failed");
                None
            });
        let refreshed = match &listed {
            Some(repo) => self.patterns.index(repo, &progress).await,
            None => self.patterns.refresh(&tag, &progress).await,
        };
        match refreshed {
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
                tracing::warn!(tag = ?tag, code = e.code(), "refreshing an example failed; the previous index is kept");
                run.finish(
                    RunEventKind::Error,
                    json!({"code": e.code(), "detail": "the refresh failed; the previous index is kept"}),
                );
                Ok(bridle_memory::tools::refusal(REFRESH_TOOL, &e))
            }
        }
    }
}
