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

fn more(next: &Option<String>) -> &'static str {
    if next.is_some() { "+" } else { "" }
}

/// `GET /`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
) -> Result<Page, PanelError> {
    let api = &panel.api;
    let (projects, queue, tickets, integrations) = tokio::join!(
        api.get::<ProjectPage>(&who, "/projects?limit=500"),
        api.get::<ProposalPage>(&who, "/queue?limit=500"),
        api.get::<TicketPage>(&who, "/scope-tickets?limit=500"),
        api.get::<IntegrationPage>(&who, "/integrations?limit=500"),
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
    ];
    panel.page(
        &who,
        "overview.html",
        "overview",
        context! { tiles => Serde(tiles), recent => Serde(recent) },
    )
}
