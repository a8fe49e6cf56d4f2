//! Session memory: what agents decided, learned and did, recalled by meaning.
//!
//! A memory is a short text with its `kind` (decision, context, history, ...), the `project` it
//! belongs to, and optionally the `agent` and `session` that wrote it and free `tags`. `recall`
//! embeds the query and searches within a project, with optional equality filters on kind,
//! agent, session and tags (all given tags must be present). `list` and `forget` are for
//! administration. Everything lives in one collection of the vector store, so the embedded store
//! and Qdrant behave the same.
//!
//! Each memory records the embedding model that made its vector (`embedding_model` in its
//! payload). A recall whose hits include a memory embedded by another model is refused with
//! [`MemoryError::ModelMismatch`] (its similarities to the query would mean nothing), until
//! [`SessionMemory::reembed`] has embedded those memories again from their stored text with
//! the model configured now. Memories written before the model was recorded carry none and are
//! taken as they are (`reembed` stamps them too).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::embed::{Embedder, check_vectors, fit_input};
use crate::error::{MemoryError, Result};
use crate::patterns::{SearchMode, search_store};
use crate::store::{
    CollectionConfig, Condition, Filter, Pages, Payload, Point, PointId, VectorStore,
};
use crate::time::{fresh_id, rfc3339, unix_now};

/// The longest memory text accepted, in characters.
pub const MAX_TEXT_CHARS: usize = 16_000;

/// The longest project, agent or session name a memory may carry, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// The longest kind a memory may carry, in characters.
const MAX_KIND_CHARS: usize = 64;

/// The most tags a memory may carry, and the longest tag, in characters.
const MAX_TAGS: usize = 32;
const MAX_TAG_CHARS: usize = 100;

/// How many memories one project may hold unless set otherwise
/// ([`SessionMemory::with_max_per_project`]): with texts of at most [`MAX_TEXT_CHARS`], a
/// project's memories stay within a few hundred megabytes, whatever an agent does in a loop.
pub const DEFAULT_MAX_PER_PROJECT: u64 = 10_000;

/// A memory to store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMemory {
    /// What it is: `decision`, `context`, `history`, or any word the project uses.
    pub kind: String,
    /// The text.
    pub text: String,
    /// The project it belongs to.
    pub project: String,
    /// The agent that wrote it.
    pub agent: Option<String>,
    /// The session it came from.
    pub session: Option<String>,
    /// Free tags.
    pub tags: Vec<String>,
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Memory {
    /// Its id (for `forget`).
    pub id: u64,
    /// Its kind.
    pub kind: String,
    /// Its text.
    pub text: String,
    /// Its project.
    pub project: String,
    /// The agent that wrote it.
    pub agent: Option<String>,
    /// The session it came from.
    pub session: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// When it was written (RFC 3339).
    pub created_at: String,
}

/// A recalled memory and how close it is to the query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecallHit {
    /// Higher is closer: the cosine similarity in `vector` mode, the fused reciprocal-rank score
    /// in `hybrid` mode.
    pub score: f32,
    /// The memory.
    #[serde(flatten)]
    pub memory: Memory,
}

/// Which memories to consider. Every field set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoryFilter {
    /// Only this project.
    pub project: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this session.
    pub session: Option<String>,
    /// Only memories carrying all of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl MemoryFilter {
    /// A filter on one project.
    pub fn project(p: impl Into<String>) -> Self {
        Self {
            project: Some(p.into()),
            ..Self::default()
        }
    }

    /// Refuses a filter no memory could match for its size alone: more tags than a memory
    /// holds, or a name longer than a memory may carry. Each tag is a condition checked against
    /// every memory a recall scans, so an agent's list of them is bounded as a memory's is.
    fn check_bounds(&self) -> Result<()> {
        for (what, v, max) in [
            ("project", &self.project, MAX_NAME_CHARS),
            ("kind", &self.kind, MAX_KIND_CHARS),
            ("agent", &self.agent, MAX_NAME_CHARS),
            ("session", &self.session, MAX_NAME_CHARS),
        ] {
            if v.as_ref().is_some_and(|v| v.chars().count() > max) {
                return Err(MemoryError::InvalidInput(format!(
                    "`{what}` must be at most {max} characters"
                )));
            }
        }
        if self.tags.len() > MAX_TAGS || self.tags.iter().any(|t| t.chars().count() > MAX_TAG_CHARS)
        {
            return Err(MemoryError::InvalidInput(format!(
                "at most {MAX_TAGS} tags, each at most {MAX_TAG_CHARS} characters, as a memory holds"
            )));
        }
        Ok(())
    }

    fn to_filter(&self) -> Filter {
        let mut f = Filter::all();
        for (key, v) in [
            ("project", &self.project),
            ("kind", &self.kind),
            ("agent", &self.agent),
            ("session", &self.session),
        ] {
            if let Some(v) = v {
                f = f.and(Condition::matches(key, v.as_str()));
            }
        }
        for t in &self.tags {
            f = f.and(Condition::matches("tags", t.as_str()));
        }
        f
    }
}

fn opt(p: &Payload, key: &str) -> Option<String> {
    p.get(key).and_then(Value::as_str).map(str::to_string)
}

/// The payload field that names the model a memory's vector was made by.
const MODEL_FIELD: &str = "embedding_model";

/// The model recorded with a memory, when it is not `current` (none recorded: taken as is).
fn stale_model<'a>(p: &'a Payload, current: &str) -> Option<&'a str> {
    p.get(MODEL_FIELD)
        .and_then(Value::as_str)
        .filter(|m| *m != current)
}

fn memory_of(id: PointId, p: &Payload) -> Memory {
    Memory {
        id,
        kind: opt(p, "kind").unwrap_or_default(),
        text: opt(p, "text").unwrap_or_default(),
        project: opt(p, "project").unwrap_or_default(),
        agent: opt(p, "agent"),
        session: opt(p, "session"),
        tags: p
            .get("tags")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        created_at: opt(p, "created_at").unwrap_or_default(),
    }
}

fn required(what: &str, v: &str, max: usize) -> Result<()> {
    if v.trim().is_empty() {
        return Err(MemoryError::InvalidInput(format!(
            "`{what}` must not be empty"
        )));
    }
    if v.chars().count() > max {
        return Err(MemoryError::InvalidInput(format!(
            "`{what}` must be at most {max} characters"
        )));
    }
    Ok(())
}

/// What [`SessionMemory::reembed`] did.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ReembedReport {
    /// Memories embedded again by the configured model (another model's, or none recorded).
    pub reembedded: u64,
    /// Memories already embedded by the configured model, left as they were.
    pub unchanged: u64,
}

/// How many memories are read per page and embedded per request while re-embedding.
const REEMBED_PAGE: usize = 256;
const REEMBED_BATCH: usize = 32;

/// Session memory over any store and embedder.
#[derive(Clone)]
pub struct SessionMemory {
    store: Arc<dyn VectorStore>,
    embedder: Arc<dyn Embedder>,
    collection: String,
    mode: SearchMode,
    /// Held by deletions and by each batch that [`SessionMemory::reembed`] writes back, so a
    /// memory forgotten while its text was being embedded again is not written back to life.
    writes: Arc<tokio::sync::Mutex<()>>,
    /// What a `model_mismatch` tells the reader to do (see
    /// [`SessionMemory::with_reembed_remedy`]).
    reembed_remedy: Arc<str>,
    /// The most memories one project may hold.
    max_per_project: u64,
}

/// The remedy a `model_mismatch` of session memory names unless the host names its own.
const DEFAULT_REEMBED_REMEDY: &str = "embed them again with `SessionMemory::reembed`";

impl std::fmt::Debug for SessionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionMemory")
            .field("store", &self.store.backend())
            .field("collection", &self.collection)
            .finish()
    }
}

impl SessionMemory {
    /// Session memory in the `session_memory` collection.
    pub fn new(store: Arc<dyn VectorStore>, embedder: Arc<dyn Embedder>) -> Self {
        Self::in_collection(store, embedder, "session_memory")
    }

    /// Session memory in a named collection.
    pub fn in_collection(
        store: Arc<dyn VectorStore>,
        embedder: Arc<dyn Embedder>,
        collection: impl Into<String>,
    ) -> Self {
        Self {
            store,
            embedder,
            collection: collection.into(),
            mode: SearchMode::default(),
            writes: Arc::default(),
            reembed_remedy: Arc::from(DEFAULT_REEMBED_REMEDY),
            max_per_project: DEFAULT_MAX_PER_PROJECT,
        }
    }

    /// The same memory, naming `remedy` in the [`MemoryError::ModelMismatch`] a recall over
    /// another model's vectors returns: how whoever reads it (an agent, an operator) has the
    /// memories embedded again in the host, such as a command or an admin route. Unless set,
    /// it names [`SessionMemory::reembed`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use bridle_memory::{ConstantEmbedder, EmbeddedStore, SessionMemory};
    /// # fn main() -> bridle_memory::Result<()> {
    /// let store = Arc::new(EmbeddedStore::open_in_memory()?);
    /// let memory = SessionMemory::new(store, Arc::new(ConstantEmbedder::new(64)))
    ///     .with_reembed_remedy("`myapp memory reembed`");
    /// # let _ = memory;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_reembed_remedy(mut self, remedy: impl Into<String>) -> Self {
        self.reembed_remedy = Arc::from(remedy.into());
        self
    }

    /// The same memory, storing at most `limit` memories per project (default
    /// [`DEFAULT_MAX_PER_PROJECT`]). [`SessionMemory::remember`] into a project that holds that
    /// many fails with [`MemoryError::MemoryQuota`] and stores nothing; memories already stored
    /// past a lowered limit stay.
    pub fn with_max_per_project(mut self, limit: u64) -> Self {
        self.max_per_project = limit;
        self
    }

    /// The most memories one project may hold.
    pub fn max_per_project(&self) -> u64 {
        self.max_per_project
    }

    /// The same memory, recalling in `mode` by default.
    pub fn with_search_mode(mut self, mode: SearchMode) -> Self {
        self.mode = mode;
        self
    }

    /// How [`SessionMemory::recall`] ranks.
    pub fn search_mode(&self) -> SearchMode {
        self.mode
    }

    async fn exists(&self) -> Result<bool> {
        Ok(self.store.collection(&self.collection).await?.is_some())
    }

    /// Stores a memory and returns it with its id.
    pub async fn remember(&self, m: NewMemory) -> Result<Memory> {
        required("kind", &m.kind, MAX_KIND_CHARS)?;
        required("project", &m.project, MAX_NAME_CHARS)?;
        required("text", &m.text, MAX_TEXT_CHARS)?;
        // Every field is bounded, or the quota would bound the count but not the size.
        for (what, v) in [("agent", &m.agent), ("session", &m.session)] {
            if let Some(v) = v
                && v.chars().count() > MAX_NAME_CHARS
            {
                return Err(MemoryError::InvalidInput(format!(
                    "`{what}` must be at most {MAX_NAME_CHARS} characters"
                )));
            }
        }
        if m.tags.len() > MAX_TAGS
            || m.tags
                .iter()
                .any(|t| t.trim().is_empty() || t.chars().count() > MAX_TAG_CHARS)
        {
            return Err(MemoryError::InvalidInput(format!(
                "at most {MAX_TAGS} tags, each 1 to {MAX_TAG_CHARS} characters"
            )));
        }
        // A text longer than the model's window is stored whole and embedded by its beginning.
        let v = self
            .embedder
            .embed(&[fit_input(self.embedder.as_ref(), &m.text)])
            .await?;
        check_vectors(self.embedder.dimension(), 1, &v)?;
        self.store
            .ensure_collection(
                &self.collection,
                CollectionConfig::cosine(self.embedder.dimension()),
            )
            .await?;
        let id = fresh_id();
        let now = unix_now();
        let mut payload = Payload::new();
        payload.insert("kind".into(), json!(m.kind));
        payload.insert("text".into(), json!(m.text));
        payload.insert("project".into(), json!(m.project));
        if let Some(a) = &m.agent {
            payload.insert("agent".into(), json!(a));
        }
        if let Some(s) = &m.session {
            payload.insert("session".into(), json!(s));
        }
        payload.insert("tags".into(), json!(m.tags));
        payload.insert(MODEL_FIELD.into(), json!(self.embedder.model()));
        payload.insert("created_at".into(), json!(rfc3339(now)));
        payload.insert("created_unix".into(), json!(now));
        let memory = memory_of(id, &payload);
        let vector = v.into_iter().next().unwrap_or_default();
        // Counted and stored under the write lock, so concurrent calls cannot pass the limit.
        let _writing = self.writes.lock().await;
        let held = self
            .store
            .count(
                &self.collection,
                Some(&Filter::all().and(Condition::matches("project", m.project.as_str()))),
            )
            .await?;
        if held >= self.max_per_project {
            return Err(MemoryError::MemoryQuota {
                project: m.project,
                limit: self.max_per_project,
            });
        }
        self.store
            .upsert(
                &self.collection,
                vec![Point {
                    id,
                    vector,
                    payload,
                }],
            )
            .await?;
        Ok(memory)
    }

    /// The `k` memories closest to `query` among those matching `filter`, ranked the default
    /// way ([`SessionMemory::with_search_mode`]; hybrid unless set).
    pub async fn recall(
        &self,
        query: &str,
        filter: &MemoryFilter,
        k: usize,
    ) -> Result<Vec<RecallHit>> {
        self.recall_with(query, filter, k, self.mode).await
    }

    /// [`SessionMemory::recall`] ranked by `mode`. A filter of more tags, or of longer names,
    /// than a memory may carry fails with [`MemoryError::InvalidInput`].
    pub async fn recall_with(
        &self,
        query: &str,
        filter: &MemoryFilter,
        k: usize,
        mode: SearchMode,
    ) -> Result<Vec<RecallHit>> {
        required("query", query, MAX_TEXT_CHARS)?;
        filter.check_bounds()?;
        if !self.exists().await? {
            return Ok(Vec::new());
        }
        let v = self
            .embedder
            .embed(&[fit_input(self.embedder.as_ref(), query)])
            .await?;
        check_vectors(self.embedder.dimension(), 1, &v)?;
        let f = filter.to_filter();
        let hits = search_store(
            self.store.as_ref(),
            &self.collection,
            mode,
            &v[0],
            query,
            Some(&f),
            k.clamp(1, 100),
        )
        .await?;
        // Vectors of another model rank by meaningless similarities: refused, not ranked.
        if let Some(indexed) = hits
            .iter()
            .find_map(|h| stale_model(&h.payload, self.embedder.model()))
        {
            return Err(MemoryError::ModelMismatch {
                indexed: indexed.to_string(),
                current: self.embedder.model().to_string(),
                remedy: self.reembed_remedy.to_string(),
            });
        }
        Ok(hits
            .into_iter()
            .map(|h| RecallHit {
                score: h.score,
                memory: memory_of(h.id, &h.payload),
            })
            .collect())
    }

    /// Memories matching `filter` in id order, a page at a time: pass the returned cursor as
    /// `after` for the next page.
    pub async fn list(
        &self,
        filter: &MemoryFilter,
        after: Option<u64>,
        limit: usize,
    ) -> Result<(Vec<Memory>, Option<u64>)> {
        if !self.exists().await? {
            return Ok((Vec::new(), None));
        }
        let f = filter.to_filter();
        let (records, next) = self
            .store
            .scroll(&self.collection, Some(&f), after, limit.clamp(1, 1000))
            .await?;
        Ok((
            records
                .iter()
                .map(|r| memory_of(r.id, &r.payload))
                .collect(),
            next,
        ))
    }

    /// Embeds again, from its stored text, every memory that another embedding model embedded
    /// (or that records none), with the model configured now, keeping its id and payload; a
    /// memory already embedded by this model is left alone, so a second run does nothing and an
    /// interrupted one resumes where it stopped. Memories written meanwhile are the new model's
    /// already; one forgotten meanwhile stays forgotten. The configured model must have the
    /// collection's dimension (the store refuses another).
    pub async fn reembed(&self) -> Result<ReembedReport> {
        let mut report = ReembedReport::default();
        self.reembed_into(&mut report).await?;
        Ok(report)
    }

    /// [`SessionMemory::reembed`], counting into `report` as it goes: after an error (the
    /// embedder or the store failed part-way), `report` says what was done before it, which
    /// stays done.
    pub async fn reembed_into(&self, report: &mut ReembedReport) -> Result<()> {
        if !self.exists().await? {
            return Ok(());
        }
        let model = self.embedder.model().to_string();
        // A store whose paging does not advance fails the run instead of looping.
        let mut pages = Pages::new(&self.collection);
        loop {
            let (records, next) = self
                .store
                .scroll(&self.collection, None, pages.offset(), REEMBED_PAGE)
                .await?;
            let more = pages.check(&records, next)?;
            let (current, stale): (Vec<_>, Vec<_>) = records
                .into_iter()
                .partition(|r| r.payload.get(MODEL_FIELD).and_then(Value::as_str) == Some(&model));
            report.unchanged += current.len() as u64;
            for batch in stale.chunks(REEMBED_BATCH) {
                let texts: Vec<String> = batch
                    .iter()
                    .map(|r| {
                        let text = r.payload.get("text").and_then(Value::as_str).unwrap_or("");
                        fit_input(self.embedder.as_ref(), text)
                    })
                    .collect();
                let vectors = self.embedder.embed(&texts).await?;
                check_vectors(self.embedder.dimension(), batch.len(), &vectors)?;
                let _writes = self.writes.lock().await;
                // Only the memories still there are written back.
                let ids: Vec<PointId> = batch.iter().map(|r| r.id).collect();
                let (live, _) = self
                    .store
                    .scroll(
                        &self.collection,
                        Some(&Filter::all().and(Condition::HasId(ids))),
                        None,
                        batch.len(),
                    )
                    .await?;
                let live: std::collections::HashSet<PointId> = live.iter().map(|r| r.id).collect();
                let points: Vec<Point> = batch
                    .iter()
                    .zip(vectors)
                    .filter(|(r, _)| live.contains(&r.id))
                    .map(|(r, vector)| {
                        let mut payload = r.payload.clone();
                        payload.insert(MODEL_FIELD.into(), json!(model));
                        Point {
                            id: r.id,
                            vector,
                            payload,
                        }
                    })
                    .collect();
                report.reembedded += points.len() as u64;
                if !points.is_empty() {
                    self.store.upsert(&self.collection, points).await?;
                }
            }
            if !more {
                break;
            }
        }
        Ok(())
    }

    /// Deletes one memory. An unknown id answers [`MemoryError::UnknownMemory`].
    pub async fn forget(&self, id: u64) -> Result<()> {
        let _writes = self.writes.lock().await;
        if !self.exists().await? {
            return Err(MemoryError::UnknownMemory(id));
        }
        let n = self
            .store
            .delete(
                &self.collection,
                &Filter::all().and(Condition::HasId(vec![id])),
            )
            .await?;
        if n == 0 {
            return Err(MemoryError::UnknownMemory(id));
        }
        Ok(())
    }

    /// Deletes every memory matching `filter` (an empty filter is refused: use a project).
    pub async fn forget_matching(&self, filter: &MemoryFilter) -> Result<u64> {
        let f = filter.to_filter();
        if f.is_empty() {
            return Err(MemoryError::InvalidInput(
                "refusing to forget everything: give at least a project".into(),
            ));
        }
        let _writes = self.writes.lock().await;
        if !self.exists().await? {
            return Ok(0);
        }
        self.store.delete(&self.collection, &f).await
    }
}
