//! Agents: the identity mapping (type, projects), tokens by fingerprint and version, and the
//! calls each made. Issuing or rotating a token shows it exactly once, on the page that answers
//! the form (never in a redirect, never stored), with the connect snippets for the agent
//! command lines; revoking asks for the agent's name in a `<dialog>` first. An agent is created
//! here (name, type, projects; its first token shown once the same way) and its type and
//! projects changed, through the API's `POST /agents` and `PATCH /agents/{name}`.
//!
//! The wire types are read leniently (the panel's own structs, unknown fields ignored), so the
//! page works with whatever version of the agents resource the API has; without it, the page
//! says the API does not offer it.

use axum::extract::{Extension, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{Notice, PanelForm, PanelPath, confirm_matches};
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError, see_other};

/// One token version of an agent (metadata only).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TokenMeta {
    version: u64,
    fingerprint: String,
    created_by: String,
    created_at: String,
    valid_until: Option<String>,
    revoked_at: Option<String>,
    valid: bool,
}

/// An agent as the API describes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AgentView {
    name: String,
    agent_type: String,
    type_guessed: bool,
    projects: Vec<String>,
    token_source: String,
    token_versions: Vec<TokenMeta>,
    sessions: u64,
    calls_made: u64,
    calls_refused: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AgentPage {
    items: Vec<AgentView>,
    next_cursor: Option<String>,
}

/// A token the API issued: shown once.
#[derive(Deserialize)]
struct IssuedToken {
    agent: String,
    version: u64,
    token: String,
    /// Set when the audit log could not record the issue: shown beside the token.
    #[serde(default)]
    warning: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Revoked {
    agent: String,
    revoked_tokens: u64,
    ended_sessions: u64,
}

/// The rotate form.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RotateForm {
    #[serde(default)]
    grace_secs: Option<String>,
}

/// The revoke form: the agent's name typed again.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConfirmForm {
    #[serde(default)]
    confirm: String,
}

#[derive(Serialize)]
struct RotateBody {
    grace_secs: u64,
}

/// The create form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CreateForm {
    name: String,
    agent_type: String,
    projects: String,
}

/// The change form: the type, and the projects (comma- or space-separated; empty is all).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChangeForm {
    agent_type: String,
    projects: String,
}

#[derive(Serialize)]
struct CreateBody<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    agent_type: &'a str,
    projects: Vec<String>,
}

#[derive(Serialize)]
struct ChangeBody<'a> {
    #[serde(rename = "type")]
    agent_type: &'a str,
    projects: Vec<String>,
}

/// What the API answers to a creation: the agent and its first token.
#[derive(Deserialize)]
struct CreatedAgent {
    token: IssuedToken,
}

/// A projects field as a list (comma- or whitespace-separated, duplicates once).
fn project_list(field: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in field.split([',', ' ', '\n', '\t']).map(str::trim) {
        if !p.is_empty() && !out.iter().any(|o| o == p) {
            out.push(p.to_string());
        }
    }
    out
}

/// `GET /agents`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    notice: Notice,
    headers: axum::http::HeaderMap,
) -> Result<Page, PanelError> {
    let page: AgentPage = panel.api.get(&who, "/agents?limit=500").await?;
    let ctx = context! {
        agents => Serde(page.items),
        more => page.next_cursor.is_some(),
        notice => notice.text(),
        agent_types => Serde(panel.agent_types.as_ref()),
    };
    // The rows alone for the live list's refresh.
    if crate::panel::guard::is_htmx(&headers) {
        return panel.partial(&who, "partials/agent_rows.html", ctx);
    }
    panel.page(&who, "agents.html", "agents", ctx)
}

/// `GET /agents/{name}`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
    notice: Notice,
) -> Result<Page, PanelError> {
    let agent: AgentView = panel
        .api
        .get(&who, &format!("/agents/{}", seg(&name)))
        .await?;
    let projects = agent.projects.join(", ");
    panel.page(
        &who,
        "agent.html",
        "agents",
        context! {
            a => Serde(agent),
            projects => projects,
            agent_types => Serde(panel.agent_types.as_ref()),
            notice => notice.text(),
        },
    )
}

/// `POST /agents`: a new agent and its first token, shown once.
pub(crate) async fn create(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelForm(form): PanelForm<CreateForm>,
) -> Result<Response, PanelError> {
    let name = form.name.trim();
    let agent_type = form.agent_type.trim();
    if name.is_empty() || agent_type.is_empty() {
        return Err(PanelError::BadForm(
            "a new agent needs a name and a type; nothing was created".into(),
        ));
    }
    let created: CreatedAgent = panel
        .api
        .call(
            &who,
            Method::POST,
            "/agents",
            &CreateBody {
                name,
                agent_type,
                projects: project_list(&form.projects),
            },
        )
        .await?;
    tracing::info!(agent = %name, admin = %who.admin, "agent created through the panel");
    token_page(&panel, &who, created.token, "created")
}

/// `POST /agents/{name}/change`: a new type and projects.
pub(crate) async fn change(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
    PanelForm(form): PanelForm<ChangeForm>,
) -> Result<Response, PanelError> {
    let agent_type = form.agent_type.trim();
    if agent_type.is_empty() {
        return Err(PanelError::BadForm(
            "an agent has a type; nothing was changed".into(),
        ));
    }
    panel
        .api
        .call::<serde_json::Value>(
            &who,
            Method::PATCH,
            &format!("/agents/{}", seg(&name)),
            &ChangeBody {
                agent_type,
                projects: project_list(&form.projects),
            },
        )
        .await?;
    Ok(see_other(&panel.url(&format!(
        "/agents/{}?notice=agent_changed",
        seg(&name)
    ))))
}

/// The connect snippets for a freshly shown token, per agent command line.
#[derive(Serialize)]
struct Snippet {
    client: &'static str,
    text: String,
}

fn snippets(mcp_url: &str, token: &str) -> Vec<Snippet> {
    vec![
        Snippet {
            client: "Claude Code",
            text: format!(
                "claude mcp add --scope user --transport http bridle {mcp_url} --header \"Authorization: Bearer {token}\""
            ),
        },
        Snippet {
            client: "Codex (~/.codex/config.toml, then export the variable before starting codex)",
            text: format!(
                "[mcp_servers.bridle]\nurl = \"{mcp_url}\"\nbearer_token_env_var = \"BRIDLE_TOKEN\"\n\nexport BRIDLE_TOKEN='{token}'"
            ),
        },
        Snippet {
            client: "Gemini CLI",
            text: format!(
                "gemini mcp add --scope user --transport http bridle {mcp_url} --header \"Authorization: Bearer {token}\""
            ),
        },
    ]
}

fn token_page(
    panel: &Panel,
    who: &SignedIn,
    issued: IssuedToken,
    what: &str,
) -> Result<Response, PanelError> {
    let mcp_url = panel
        .config
        .mcp_url
        .clone()
        .unwrap_or_else(|| "http://127.0.0.1:7878/mcp".into());
    let snippets = snippets(&mcp_url, &issued.token);
    let page = panel.page(
        who,
        "agent_token.html",
        "agents",
        context! {
            agent => issued.agent,
            version => issued.version,
            token => issued.token,
            warning => issued.warning,
            what => what,
            mcp_url => mcp_url,
            mcp_url_known => panel.config.mcp_url.is_some(),
            snippets => Serde(snippets),
        },
    )?;
    Ok(page.into_response())
}

/// `POST /agents/{name}/token`: a first vault token, shown once.
pub(crate) async fn issue(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
) -> Result<Response, PanelError> {
    let issued: IssuedToken = panel
        .api
        .post_empty(&who, &format!("/agents/{}/token", seg(&name)))
        .await?;
    token_page(&panel, &who, issued, "issued")
}

/// `POST /agents/{name}/rotate`: a new token, the old one valid for the grace period.
pub(crate) async fn rotate(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
    PanelForm(form): PanelForm<RotateForm>,
) -> Result<Response, PanelError> {
    let grace_secs = match form.grace_secs.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(g) => g.parse().map_err(|_| {
            PanelError::BadForm("the grace period is a whole number of seconds".into())
        })?,
    };
    let issued: IssuedToken = panel
        .api
        .call(
            &who,
            Method::POST,
            &format!("/agents/{}/rotate", seg(&name)),
            &RotateBody { grace_secs },
        )
        .await?;
    token_page(&panel, &who, issued, "rotated")
}

/// `POST /agents/{name}/revoke`: every token revoked and the agent's sessions ended, once the
/// admin typed the agent's name.
pub(crate) async fn revoke(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
    PanelForm(form): PanelForm<ConfirmForm>,
) -> Result<Response, PanelError> {
    confirm_matches(&form.confirm, &name)?;
    let revoked: Revoked = panel
        .api
        .post_empty(&who, &format!("/agents/{}/revoke", seg(&name)))
        .await?;
    tracing::info!(agent = %revoked.agent, admin = %who.admin, "agent tokens revoked through the panel");
    Ok(see_other(&panel.url(&format!(
        "/agents/{}?notice=agent_revoked",
        seg(&name)
    ))))
}
