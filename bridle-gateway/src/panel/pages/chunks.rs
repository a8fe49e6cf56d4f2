//! A pattern's indexed chunks, page by page: what its example repositories were cut into and
//! stored as, so an admin can see what agents will find when they search the pattern. Opened
//! from the patterns page; filtered by example, chunk type and file.
//!
//! The page reads the admin API's `GET /projects/{project}/patterns/{pattern}/chunks`; its
//! refusals are the page's: an unknown project, pattern or example is the 404 page, a cursor
//! the API did not hand out the 400 page, a gateway without memory the 503 page.

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{PanelPath, PanelQuery};
use crate::admin::patterns::PatternList;
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::session::SignedIn;
use crate::panel::view::PanelError;

/// Chunks a page shows.
const PAGE: usize = 20;

/// The chunk types the filter offers (the chunker's types).
const CHUNK_TYPES: &[&str] = &[
    "function", "type", "impl", "module", "block", "section", "window",
];

/// The filter form and the cursor, as the query string carries them.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct ChunkParams {
    tag: String,
    chunk_type: String,
    file: String,
    cursor: String,
}

/// One chunk as the page reads it from the API.
#[derive(Debug, Deserialize, Serialize)]
struct Chunk {
    id: u64,
    reference_tag: String,
    file_path: String,
    start_line: u64,
    end_line: u64,
    chunk_type: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    last_indexed: String,
    snippet: String,
}

/// A page of the API's listing.
#[derive(Debug, Deserialize)]
struct ChunkList {
    items: Vec<Chunk>,
    #[serde(default)]
    next_cursor: Option<String>,
}

/// The query string of the same filter at `cursor` (empty fields left out).
fn query_of(p: &ChunkParams, cursor: Option<&str>, limit: Option<usize>) -> String {
    let limit = limit.map(|l| l.to_string());
    let pairs: Vec<(&str, &str)> = [
        ("tag", p.tag.trim()),
        ("chunk_type", p.chunk_type.trim()),
        ("file", p.file.trim()),
        ("cursor", cursor.unwrap_or_default()),
        ("limit", limit.as_deref().unwrap_or_default()),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// `GET /patterns/{project}/{pattern}/chunks`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, pattern)): PanelPath<(String, String)>,
    PanelQuery(params): PanelQuery<ChunkParams>,
) -> Result<Response, PanelError> {
    let (p, c) = (seg(&project), seg(&pattern));
    let api_query = query_of(&params, Some(params.cursor.trim()), Some(PAGE));
    let page: ChunkList = panel
        .api
        .get(
            &who,
            &format!("/projects/{p}/patterns/{c}/chunks?{api_query}"),
        )
        .await?;
    let patterns: PatternList = panel
        .api
        .get(&who, &format!("/projects/{p}/patterns"))
        .await?;
    let (description, tags) = patterns
        .custom
        .iter()
        .find(|x| x.name == pattern)
        .map(|x| {
            (
                x.description.clone(),
                x.example_repos
                    .iter()
                    .map(|r| r.reference_tag.clone())
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap_or_default();
    let next = page
        .next_cursor
        .as_deref()
        .map(|n| query_of(&params, Some(n), None));
    let first = (!params.cursor.trim().is_empty()).then(|| query_of(&params, None, None));
    Ok(panel
        .page(
            &who,
            "pattern_chunks.html",
            "patterns",
            context! {
                project => project,
                pattern => pattern,
                description => description,
                tags => tags,
                chunk_types => Serde(CHUNK_TYPES),
                filter => Serde(&params),
                chunks => Serde(&page.items),
                next => next,
                first => first,
            },
        )?
        .into_response())
}
