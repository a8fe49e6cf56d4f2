//! Memory: the agents' session memories (browsed by filter a page at a time, or searched), the
//! indexed pattern-example chunks (searched; the API lists chunks only for a search), and
//! purges: the session memories a filter matches (at least a project) and an example's chunks by
//! its reference tag. Each purge asks in a native `<dialog>` for the project or the tag to be
//! typed, and the server checks it again before calling the API.
//!
//! A gateway without memory answers 503 `memory_off`; the page then says so and how to turn it
//! on, instead of failing.

use axum::extract::{Extension, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{Notice, PanelForm, PanelPath, PanelQuery, confirm_matches};
use crate::panel::Panel;
use crate::panel::api::{Problem, seg};
use crate::panel::session::SignedIn;
use crate::panel::view::{PanelError, see_other};

/// The session memories' filter (and search text), as the page's form sends it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct MemoryFilter {
    #[serde(skip_serializing_if = "Option::is_none")]
    q: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
}

impl MemoryFilter {
    fn cleaned(self) -> Self {
        let keep = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        Self {
            q: keep(self.q),
            project: keep(self.project),
            agent: keep(self.agent),
            kind: keep(self.kind),
            session: keep(self.session),
            tag: keep(self.tag),
            cursor: keep(self.cursor),
        }
    }

    /// The same filter without the cursor (the first page, the purge's scope).
    fn first_page(&self) -> Self {
        Self {
            cursor: None,
            ..self.clone()
        }
    }
}

/// The pattern-example search.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct PatternSearch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pq: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arch_tag: Option<String>,
}

/// A session memory as the API gives it (a search adds `score`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct MemoryView {
    id: u64,
    kind: String,
    text: String,
    project: String,
    agent: Option<String>,
    session: Option<String>,
    tags: Vec<String>,
    created_at: String,
    score: Option<f32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MemoryPage {
    items: Vec<MemoryView>,
    next_cursor: Option<String>,
}

/// A pattern-example chunk found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct ChunkView {
    file_path: String,
    start_line: u64,
    end_line: u64,
    chunk_type: String,
    context: String,
    score: f32,
    reference_tag: String,
    arch_tag: String,
    source_repo: String,
    snippet: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChunkPage {
    items: Vec<ChunkView>,
}

/// The session-memory purge form: the filter it was shown for, and the typed project.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PurgeForm {
    project: String,
    agent: String,
    kind: String,
    session: String,
    tag: String,
    confirm: String,
}

#[derive(Debug, Serialize)]
struct PurgeBody {
    project: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Purged {
    removed: u64,
}

/// The tag purge's confirmation.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ConfirmForm {
    confirm: String,
}

/// What the page shows where an API call did not answer: memory off, or the API's problem.
#[derive(Debug, Serialize)]
struct Unavailable {
    off: bool,
    problem: Problem,
}

fn unavailable(p: Problem) -> Result<Unavailable, PanelError> {
    if p.status == StatusCode::UNAUTHORIZED.as_u16() {
        return Err(PanelError::SessionEnded);
    }
    Ok(Unavailable {
        off: p.code == "memory_off",
        problem: p,
    })
}

fn query_of(value: &impl Serialize) -> String {
    serde_urlencoded::to_string(value).unwrap_or_default()
}

/// `GET /memory`: the session memories (listed or searched) and, with `pq`, the pattern
/// chunks found.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<MemoryFilter>,
    PanelQuery(search): PanelQuery<PatternSearch>,
    notice: Notice,
) -> Result<Response, PanelError> {
    let filter = filter.cleaned();
    let searching = filter.q.is_some();
    let mut query = query_of(&filter);
    if !query.is_empty() {
        query.push('&');
    }
    let limit = if searching { 50 } else { 100 };
    let (memories, next, memory_problem) = match panel
        .api
        .get::<MemoryPage>(&who, &format!("/memory/sessions?{query}limit={limit}"))
        .await
    {
        Ok(page) => (page.items, page.next_cursor, None),
        Err(p) => (Vec::new(), None, Some(unavailable(p)?)),
    };
    let next_href = next.map(|cursor| {
        let page = MemoryFilter {
            cursor: Some(cursor),
            ..filter.clone()
        };
        panel.url(&format!("/memory?{}", query_of(&page)))
    });

    let pq = search
        .pq
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let arch_tag = search
        .arch_tag
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let (chunks, chunk_problem) = match &pq {
        None => (Vec::new(), None),
        Some(text) => {
            let mut q = vec![("q", text.as_str()), ("limit", "25")];
            if let Some(a) = &arch_tag {
                q.push(("arch_tag", a));
            }
            match panel
                .api
                .get::<ChunkPage>(&who, &format!("/memory/patterns?{}", query_of(&q)))
                .await
            {
                Ok(page) => (page.items, None),
                Err(p) => (Vec::new(), Some(unavailable(p)?)),
            }
        }
    };
    // The reference tags found, each once, for their purge buttons.
    let mut tags: Vec<String> = chunks.iter().map(|c| c.reference_tag.clone()).collect();
    tags.sort_unstable();
    tags.dedup();

    let off = memory_problem.as_ref().is_some_and(|u| u.off)
        || chunk_problem.as_ref().is_some_and(|u| u.off);
    let scope = filter.first_page();
    Ok(panel
        .page(
            &who,
            "memory.html",
            "memory",
            context! {
                filter => Serde(&filter),
                searching => searching,
                memories => Serde(&memories),
                next_href => next_href,
                memory_problem => Serde(memory_problem.map(|u| u.problem)),
                pq => pq,
                arch_tag => arch_tag,
                chunks => Serde(&chunks),
                chunk_problem => Serde(chunk_problem.map(|u| u.problem)),
                tags => tags,
                off => off,
                // A purge is offered for a listing filtered by at least a project.
                purge => Serde((!searching && scope.project.is_some()).then_some(scope)),
                notice => notice.text(),
            },
        )?
        .into_response())
}

fn some(v: String) -> Option<String> {
    let v = v.trim().to_string();
    (!v.is_empty()).then_some(v)
}

/// `POST /memory/purge`: deletes the session memories the filter matches, once the project
/// has been typed.
pub(crate) async fn purge_sessions(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelForm(form): PanelForm<PurgeForm>,
) -> Result<Response, PanelError> {
    let project = form.project.trim().to_string();
    if project.is_empty() {
        return Err(PanelError::BadForm(
            "a purge names a project; nothing was removed".into(),
        ));
    }
    confirm_matches(&form.confirm, &project)?;
    let body = PurgeBody {
        project: project.clone(),
        agent: some(form.agent),
        kind: some(form.kind),
        session: some(form.session),
        tags: some(form.tag).into_iter().collect(),
    };
    let purged: Purged = panel
        .api
        .call(&who, Method::POST, "/memory/sessions/purge", &body)
        .await?;
    let back = serde_urlencoded::to_string([
        ("notice", "memories_purged"),
        ("id", &purged.removed.to_string()),
        ("project", &project),
    ])
    .unwrap_or_default();
    Ok(see_other(&panel.url(&format!("/memory?{back}"))))
}

/// What `POST /memory/sessions/reembed` answers.
#[derive(Debug, Deserialize)]
struct Reembedded {
    reembedded: u64,
}

/// `POST /memory/reembed`: embeds the session memories of another embedding model again (the
/// page offers it where a search answered `model_mismatch`).
pub(crate) async fn reembed_sessions(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
) -> Result<Response, PanelError> {
    let done: Reembedded = panel
        .api
        .post_empty(&who, "/memory/sessions/reembed")
        .await?;
    Ok(see_other(&panel.url(&format!(
        "/memory?notice=memories_reembedded&id={}",
        done.reembedded
    ))))
}

/// `POST /memory/patterns/{tag}/purge`: removes one example's chunks, once its tag has been
/// typed.
pub(crate) async fn purge_tag(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(tag): PanelPath<String>,
    PanelForm(form): PanelForm<ConfirmForm>,
) -> Result<Response, PanelError> {
    confirm_matches(&form.confirm, &tag)?;
    let purged: Purged = panel
        .api
        .post_empty(&who, &format!("/memory/patterns/{}/purge", seg(&tag)))
        .await?;
    Ok(see_other(&panel.url(&format!(
        "/memory?notice=chunks_purged&id={}",
        purged.removed
    ))))
}
