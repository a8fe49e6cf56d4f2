//! The overview: how many projects, what waits for a person (proposals, scope tickets), and
//! the upstreams' health, each from its admin API resource. A resource this gateway's API does
//! not offer is shown as such; one that fails shows its error in place, and the rest of the
//! page still shows.

use axum::extract::{Extension, State};
use minijinja::context;
use minijinja::value::Serde;
use serde::Serialize;

use crate::admin::integrations::IntegrationPage;
use crate::admin::projects::ProjectPage;
use crate::admin::queue::ProposalPage;
use crate::admin::scope::TicketPage;
use crate::panel::Panel;
use crate::panel::api::Problem;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError};

/// One tile of the overview.
#[derive(Debug, Serialize)]
struct Tile {
    title: &'static str,
    href: &'static str,
    /// The headline figure, when the resource answered.
    value: Option<String>,
    /// What the figure means.
    caption: String,
    /// Why there is no figure.
    problem: Option<String>,
}

fn tile<T>(
    title: &'static str,
    href: &'static str,
    r: Result<T, Problem>,
    show: impl FnOnce(T) -> (String, String),
) -> Result<Tile, PanelError> {
    Ok(match r {
        Ok(v) => {
            let (value, caption) = show(v);
            Tile {
                title,
                href,
                value: Some(value),
                caption,
                problem: None,
            }
        }
        Err(p) if p.status == 401 => return Err(PanelError::SessionEnded),
        Err(p) if p.is_missing_endpoint() => Tile {
            title,
            href,
            value: None,
            caption: String::new(),
            problem: Some("not offered by this gateway".into()),
        },
        Err(p) => Tile {
            title,
            href,
            value: None,
            caption: String::new(),
            problem: Some(format!("{}: {}", p.code, p.detail)),
        },
    })
}

/// Any list resource, read only for its length (the agents, sessions and audit resources).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Listed {
    items: Vec<serde_json::Value>,
    next_cursor: Option<String>,
}

fn more(next: &Option<String>) -> &'static str {
    if next.is_some() { "+" } else { "" }
}

/// `GET /`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
) -> Result<Page, PanelError> {
    let api = &panel.api;
    let (projects, queue, tickets, integrations, agents, sessions, audit) = tokio::join!(
        api.get::<ProjectPage>(&who, "/projects?limit=500"),
        api.get::<ProposalPage>(&who, "/queue?limit=500"),
        api.get::<TicketPage>(&who, "/scope-tickets?limit=500"),
        api.get::<IntegrationPage>(&who, "/integrations?limit=500"),
        api.get::<Listed>(&who, "/agents?limit=500"),
        api.get::<Listed>(&who, "/sessions?limit=500"),
        api.get::<Listed>(&who, "/audit?order=desc&limit=5"),
    );
    let recent = queue
        .as_ref()
        .map(|q| q.items.iter().rev().take(5).cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    let tiles = vec![
        tile("Projects", "/projects", projects, |p| {
            (
                format!("{}{}", p.items.len(), more(&p.next_cursor)),
                "projects with canonical rules".into(),
            )
        })?,
        tile("Review queue", "/queue", queue, |q| {
            (
                format!("{}{}", q.items.len(), more(&q.next_cursor)),
                "proposals waiting for a decision".into(),
            )
        })?,
        tile("Scope tickets", "/scope", tickets, |t| {
            (
                format!("{}{}", t.items.len(), more(&t.next_cursor)),
                "agents asking for more scope".into(),
            )
        })?,
        tile("Integrations", "/integrations", integrations, |i| {
            let up = i.items.iter().filter(|x| x.connected).count();
            (
                format!("{up}/{}", i.items.len()),
                "upstream MCP servers connected".into(),
            )
        })?,
        tile("Agents", "/agents", agents, |a| {
            (
                format!("{}{}", a.items.len(), more(&a.next_cursor)),
                "agents configured".into(),
            )
        })?,
        tile("Sessions", "/sessions", sessions, |s| {
            (
                format!("{}{}", s.items.len(), more(&s.next_cursor)),
                "agent sessions connected".into(),
            )
        })?,
    ];
    // The latest audit entries, when the API offers the log.
    let entries = audit.map(|a| a.items).unwrap_or_default();
    let audit_rows: Vec<_> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "id": e["id"], "at": e["at"], "kind": e["kind"],
                "source": e["source"]["type"], "project": e["project"],
                "subject": e["subject"], "agent": e["agent"],
            })
        })
        .collect();
    panel.page(
        &who,
        "overview.html",
        "overview",
        context! { tiles => Serde(tiles), recent => Serde(recent), audit => Serde(audit_rows) },
    )
}
