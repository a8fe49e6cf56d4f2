//! The rules as MCP resources: `bridle://rules/<project>/<agent-type>` for each project and each
//! configured agent type, and the [`watch`] task that notifies subscribers when a project's
//! rules change (an approval, a hand edit of the YAML file).
//!
//! An agent knows of the rules of the projects it may use only ([`RulesVisibility`]), as
//! `get_rules` and `list_projects` answer: another project's rules resource is left out of its
//! listings, and reading or subscribing to it answers as for an unknown URI.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kberg_core::{
    Caller, ResourceContents, ResourceDescriptor, ResourceError, ResourceRegistry,
    ResourceVisibility, reader_fn,
};

use bridle_rules::DocumentSource;

use crate::context::GatewayContext;
use crate::error::GatewayError;

/// The URI of a rendered rules resource.
pub fn rules_uri(project: &str, agent_type: &str) -> String {
    format!("{RULES_PREFIX}{project}/{agent_type}")
}

/// What every rules resource's URI starts with.
const RULES_PREFIX: &str = "bridle://rules/";

/// The gateway's [`ResourceVisibility`]: a rules resource is shown to a configured agent that
/// may use its project, read live from the agent registry, so an admin's change holds from the
/// next listing or read. An agent that is not configured may use no project and sees none.
/// Resources that are not rules (none today) are left to the other checks.
pub struct RulesVisibility {
    gw: Arc<GatewayContext>,
}

impl RulesVisibility {
    /// The visibility of `gw`'s rules resources.
    pub fn new(gw: Arc<GatewayContext>) -> Self {
        Self { gw }
    }
}

impl ResourceVisibility for RulesVisibility {
    fn resource(&self, uri: &str, caller: &Caller) -> bool {
        let Some(rest) = uri.strip_prefix(RULES_PREFIX) else {
            return true;
        };
        // A project's name never holds a `/`; a URI without one names no rules resource.
        let Some((project, _agent_type)) = rest.split_once('/') else {
            return false;
        };
        self.gw
            .agents
            .inspect(&caller.principal().id, |agent| agent.may_use(project))
            .unwrap_or(false)
    }
}

/// Registers a rules resource for each project and each configured agent type that has none
/// yet. Returns the URIs added.
pub fn register_resources(
    resources: &ResourceRegistry,
    ctx: &Arc<GatewayContext>,
) -> Result<Vec<String>, GatewayError> {
    let mut added = Vec::new();
    let types = agent_types(ctx);
    for project in ctx.store.projects()? {
        for agent_type in &types {
            let uri = rules_uri(&project, agent_type);
            if resources.exists(&uri) {
                continue;
            }
            let s = Arc::clone(ctx);
            let (p, a) = (project.clone(), agent_type.to_string());
            let reader = reader_fn(move |uri: String, _vars| {
                let s = Arc::clone(&s);
                let (p, a) = (p.clone(), a.clone());
                async move {
                    let uri2 = uri.clone();
                    let rendered = tokio::task::spawn_blocking(move || {
                        let loaded = s.store.load_shared(&p)?;
                        s.renderer.render(&p, &loaded.document, &a)
                    })
                    .await
                    .map_err(|e| ResourceError::ReadFailed {
                        uri: uri2.clone(),
                        message: format!(
                            "internal: {}",
                            crate::error::task_failed("reading a rules resource", &e)
                        ),
                    })?
                    .map_err(|e| ResourceError::ReadFailed {
                        uri: uri2,
                        message: read_failure(&e),
                    })?;
                    Ok(vec![ResourceContents::text(
                        uri,
                        Some("text/markdown"),
                        rendered.content,
                    )])
                }
            });
            let target = ctx.renderer.catalog().get(agent_type)?;
            resources.register(
                ResourceDescriptor::new(uri.clone(), format!("{project}-{agent_type}-rules"))
                    .title(format!("{project}: rules for {}", target.display))
                    .description(format!(
                        "The canonical rules of project `{project}` rendered as {} for {}",
                        target.output, target.display
                    ))
                    .mime_type("text/markdown"),
                reader,
            )?;
            added.push(uri);
        }
    }
    Ok(added)
}

/// What a reader of a rules resource is told when the store fails: `<code>: <sentence>`, the
/// form the transport takes the answer's `code` from. As for the tools
/// ([`crate::tools::store_refusal`]), the store's own words are told only when they are about
/// the request; for a failure of the store itself (a document that does not parse, a file,
/// the database) they name the gateway's files and are logged instead.
fn read_failure(e: &bridle_rules::RulesError) -> String {
    if crate::tools::agent_facing(e) {
        return format!("{}: {e}", e.code());
    }
    tracing::error!(error = %crate::logging::one_line(&e), code = e.code(), "the rules store failed reading a rules resource");
    format!("{}: {}", e.code(), crate::tools::store_failure_message(e))
}

/// The types of the live agents, sorted, each once.
fn agent_types(ctx: &GatewayContext) -> Vec<String> {
    let mut types: Vec<String> = ctx
        .agents
        .all()
        .into_values()
        .map(|a| a.agent_type)
        .collect();
    types.sort_unstable();
    types.dedup();
    types
}

fn snapshot(projects_dir: &Path) -> BTreeMap<String, (SystemTime, u64)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(projects_dir) else {
        return out;
    };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(project) = name.strip_suffix(".yaml") else {
            continue;
        };
        if let Ok(meta) = entry.metadata() {
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            out.insert(project.to_string(), (modified, meta.len()));
        }
    }
    out
}

/// Polls the projects folder and the change log every `every` until `stop` is cancelled; when a
/// project's document changes (an approval on the command line, a hand edit), registers
/// resources for new projects and notifies the subscribers of its rules resources.
pub async fn watch(
    gw: Arc<GatewayContext>,
    resources: ResourceRegistry,
    projects_dir: PathBuf,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    // Two signals, because either alone can miss a change: file stamps catch hand edits (which
    // leave no change-log row), the change log catches a rewrite that kept the same size within
    // the filesystem's timestamp granularity.
    //
    // With the database as the source of truth (PostgreSQL) the files are only copies: the
    // projects come from the database, a change logged by any replica is written out to this
    // data directory's files, and a NOTIFY wakes the watcher at once instead of at the next tick.
    let take = |gw: Arc<GatewayContext>, dir: PathBuf| async move {
        tokio::task::spawn_blocking(move || {
            let change = gw.store.last_change_id().unwrap_or(0);
            let files = match gw.store.document_source() {
                DocumentSource::Database => gw
                    .store
                    .projects()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| (p, (SystemTime::UNIX_EPOCH, 0)))
                    .collect(),
                _ => snapshot(&dir),
            };
            (files, change)
        })
        .await
        .unwrap_or_default()
    };
    let mut heard = change_notifications(&gw);
    let (mut last, mut last_change) = take(Arc::clone(&gw), projects_dir.clone()).await;
    let mut types = agent_types(&gw);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
            Some(_) = next_notification(&mut heard) => {}
        }
        // An agent of a new type, created through the admin API, gets its rules resources.
        let live = agent_types(&gw);
        if live != types {
            if let Err(e) = register_resources(&resources, &gw) {
                tracing::warn!(error = %crate::logging::one_line(&e), "registering rules resources failed");
            }
            types = live;
        }
        let (now, change) = take(Arc::clone(&gw), projects_dir.clone()).await;
        if now == last && change == last_change {
            continue;
        }
        let mut changed: std::collections::BTreeSet<String> = now
            .iter()
            .filter(|(project, stamp)| last.get(*project) != Some(*stamp))
            .map(|(project, _)| project.clone())
            .collect();
        if change != last_change {
            let s = Arc::clone(&gw);
            let logged = tokio::task::spawn_blocking(move || s.store.changes(None, last_change))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            changed.extend(logged.into_iter().map(|c| c.project));
            if gw.store.document_source() == DocumentSource::Database {
                let s = Arc::clone(&gw);
                if let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.store.export_all()).await
                {
                    tracing::warn!(error = %crate::logging::one_line(&e), "writing out project files failed");
                }
            }
        }
        if let Err(e) = register_resources(&resources, &gw) {
            tracing::warn!(error = %crate::logging::one_line(&e), "registering rules resources failed");
        }
        // A project whose file is gone: its resources go too (subscribers are told).
        for project in last.keys().filter(|p| !now.contains_key(*p)) {
            for t in &types {
                resources.remove(&rules_uri(project, t));
            }
            changed.remove(project);
            tracing::info!(project, "project removed");
        }
        for project in changed.iter().filter(|p| now.contains_key(*p)) {
            for t in &types {
                let told = resources.notify_updated(&rules_uri(project, t));
                tracing::info!(project, agent = %t, subscribers = told, "rules changed");
            }
        }
        last = now;
        last_change = change;
    }
}

/// Change notifications from the database (PostgreSQL `LISTEN`), when the store has one.
type Notifications = Option<tokio::sync::mpsc::UnboundedReceiver<String>>;

fn change_notifications(gw: &GatewayContext) -> Notifications {
    #[cfg(feature = "postgres")]
    if let Some(db) = gw.store.postgres() {
        return Some(db.listen());
    }
    let _ = gw;
    None
}

/// The next notification; never, without a database that sends them.
async fn next_notification(heard: &mut Notifications) -> Option<String> {
    match heard {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
