//! Pattern-example RAG: index example repositories under a reference tag and search them.
//!
//! Indexing runs fetch → chunk → embed → store. Nothing is written until the very end, where
//! one [`VectorStore::replace`] swaps the tag's old chunks for the new ones: a failure anywhere
//! before (an unreachable repository, no indexable files, a repository over the limits of what a
//! run may read and hold, an embedder that is down or answers with the wrong dimension, a
//! cancelled call) leaves the previous index untouched, and a search
//! running during a refresh sees the old set or the new one, never a mix and never nothing.
//! Qdrant, which has no transaction, is the exception the `store::qdrant` module describes: a
//! refresh can be seen part way there, and one whose upload stops part way fails saying how
//! many new chunks were stored among the old ones, none of which was deleted.
//!
//! Each chunk's payload carries `reference_tag`, `arch_tag`, `source_repo`, `file_path`,
//! `chunk_type`, `context` (the enclosing items, `impl Store > pub fn load`), `start_line`, `end_line`, `language` (when known), `last_indexed` (RFC 3339),
//! `embedding_model` and the `text` of the snippet. There is no automatic re-fetching: a tag is
//! re-indexed only by [`PatternIndex::refresh`] (or by indexing it again), which reads the source
//! back from the stored payload. The payload holds the source as [`redact_url`] shows it, its
//! user part and query as `***`, as does everything else that shows a source (search results,
//! listings, reports, progress, errors, log lines): a private repository's URL may carry its
//! access token, which would otherwise sit in every chunk of the vector store (a Qdrant server
//! others can read, its snapshots, a backup of the SQLite file). So a source whose URL carried
//! credentials is refreshed by indexing it again from its full URL; a refresh from the stored
//! source fails with `repo_unavailable` saying so. A private repository whose credential the
//! host keeps for its site ([`crate::repo::GitAuth`]) has nothing to hide in its URL and
//! refreshes as any other.
//!
//! Long work reports [`ProgressEvent`]s through the [`Progress`] trait; the MCP tools turn them
//! into progress notifications, a command line into a progress bar.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::chunk::{ChunkConfig, Language, chunk_file};
use crate::embed::{Embedder, fit_input};
use crate::error::{MemoryError, Result};
use crate::repo::{
    FileRules, GitCredentials, fetch_bounded_named, redact_url, source_files, wants_credential,
};
use crate::store::{CollectionConfig, Condition, Filter, Pages, Payload, Point, VectorStore};
use crate::time::{rfc3339, stable_id, unix_now};

pub use crate::progress::{LineProgress, NoProgress, Progress, ProgressEvent};

/// One example repository of a pattern, as the rules document lists it
/// (`patterns.custom[].example_repos[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExampleRepo {
    /// A git URL or a local directory.
    pub url: String,
    /// The tag its chunks are stored under (unique per example).
    pub reference_tag: String,
    /// The architecture pattern it illustrates.
    pub arch_tag: String,
}

/// What indexing did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexReport {
    /// The tag.
    pub reference_tag: String,
    /// The pattern.
    pub arch_tag: String,
    /// The source (its user part and query shown as `***`).
    pub source_repo: String,
    /// Files indexed.
    pub files: usize,
    /// Chunks stored.
    pub chunks: usize,
    /// Chunks of the previous index that were replaced.
    pub replaced: u64,
    /// When (RFC 3339); the value to write back as the example's `last_indexed`.
    pub last_indexed: String,
}

/// How a search ranks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Vector similarity fused with a BM25 keyword ranking by reciprocal rank fusion (the
    /// default: `benches/benches/memory_retrieval.rs` measured it ahead of either alone).
    #[default]
    Hybrid,
    /// Vector similarity alone.
    Vector,
}

impl SearchMode {
    /// `hybrid` or `vector`.
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Hybrid => "hybrid",
            SearchMode::Vector => "vector",
        }
    }
}

/// How many results a search asks the store for per result it returns, so that dropping the
/// other parts of an item already listed still leaves enough.
const PARTS_PER_ITEM: usize = 3;

/// The first `limit` hits, keeping only the best-ranked hit of each item: hits of the same
/// example, file and non-empty `context` (the parts a long item or section was cut into) after
/// the first are dropped. Hits without a context (top-level blocks, windows) are all kept.
fn best_part_of_each_item(
    hits: Vec<crate::store::ScoredPoint>,
    limit: usize,
) -> Vec<crate::store::ScoredPoint> {
    let mut seen = std::collections::HashSet::new();
    hits.into_iter()
        .filter(|h| {
            let p = &h.payload;
            let context = text(p, "context");
            context.is_empty()
                || seen.insert((text(p, "reference_tag"), text(p, "file_path"), context))
        })
        .take(limit)
        .collect()
}

/// `a + b` scaled to unit length (cosine similarity to it is the mean of the two directions'
/// agreement); `a` itself when the sum is zero.
fn sum_normalised(a: &[f32], b: &[f32]) -> Vec<f32> {
    let sum: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        sum.into_iter().map(|x| x / norm).collect()
    } else {
        a.to_vec()
    }
}

/// Runs one search of `store` in `mode`.
pub(crate) async fn search_store(
    store: &dyn VectorStore,
    collection: &str,
    mode: SearchMode,
    vector: &[f32],
    query: &str,
    filter: Option<&Filter>,
    limit: usize,
) -> Result<Vec<crate::store::ScoredPoint>> {
    match mode {
        SearchMode::Vector => store.search(collection, vector, filter, limit).await,
        SearchMode::Hybrid => {
            store
                .search_hybrid(collection, vector, query, filter, limit)
                .await
        }
    }
}

/// A search hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PatternHit {
    /// The file, relative to the repository root.
    pub file_path: String,
    /// First line, 1-based.
    pub start_line: u64,
    /// Last line, inclusive.
    pub end_line: u64,
    /// `function`, `type`, `impl`, `module`, `block`, `section` or `window`.
    pub chunk_type: String,
    /// The enclosing items, e.g. `impl Store > pub fn load` (empty for top-level blocks).
    #[serde(default)]
    pub context: String,
    /// Higher is closer: the cosine similarity in `vector` mode, the fused reciprocal-rank score
    /// in `hybrid` mode.
    pub score: f32,
    /// The example's tag.
    pub reference_tag: String,
    /// The pattern.
    pub arch_tag: String,
    /// The source repository (its user part and query shown as `***`).
    pub source_repo: String,
    /// The code.
    pub snippet: String,
}

/// One indexed example, as listed by [`PatternIndex::examples`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexedExample {
    /// The tag.
    pub reference_tag: String,
    /// The pattern.
    pub arch_tag: String,
    /// The source (its user part and query shown as `***`).
    pub source_repo: String,
    /// How many chunks.
    pub chunks: u64,
    /// When it was indexed.
    pub last_indexed: String,
}

/// Which indexed chunks [`PatternIndex::chunks`] lists: every field set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkFilter {
    /// Only this pattern's chunks.
    pub arch_tag: Option<String>,
    /// Only chunks of these examples (any of them; empty: every example's).
    pub reference_tags: Vec<String>,
    /// Only chunks of this type (`function`, `type`, `section`, ...).
    pub chunk_type: Option<String>,
    /// Only chunks of this file (its path relative to the repository root).
    pub file_path: Option<String>,
}

/// One stored chunk, as listed by [`PatternIndex::chunks`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IndexedChunk {
    /// The chunk's id in the store (stable across re-indexing of unchanged code).
    pub id: u64,
    /// The example's tag.
    pub reference_tag: String,
    /// The pattern.
    pub arch_tag: String,
    /// The source repository, as given when it was indexed (its user part and query shown as
    /// `***`, as they are stored).
    pub source_repo: String,
    /// The file, relative to the repository root.
    pub file_path: String,
    /// First line, 1-based.
    pub start_line: u64,
    /// Last line, inclusive.
    pub end_line: u64,
    /// `function`, `type`, `impl`, `module`, `block`, `section` or `window`.
    pub chunk_type: String,
    /// The enclosing items (empty for top-level blocks).
    #[serde(default)]
    pub context: String,
    /// The language, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// When its example was indexed (RFC 3339).
    pub last_indexed: String,
    /// The code.
    pub snippet: String,
}

/// One page of [`PatternIndex::chunks`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkPage {
    /// The chunks, in id order.
    pub items: Vec<IndexedChunk>,
    /// Where the next page starts (pass it as `start`); `None` on the last page.
    pub next: Option<u64>,
}

/// The largest page [`PatternIndex::chunks`] returns.
pub const MAX_CHUNK_PAGE: usize = 500;

/// What an [`MemoryError::IndexTooLarge`] names as the setting that raises each indexing
/// limit. By default the Rust settings; a host that reads the limits from its own
/// configuration names its keys instead, so the reader of the error knows what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitNames {
    /// The setting of [`FileRules::max_total_bytes`].
    pub max_total_bytes: String,
    /// The setting of [`FileRules::max_files`].
    pub max_files: String,
    /// The setting of [`PatternIndexConfig::max_chunks`].
    pub max_chunks: String,
    /// The setting of [`PatternIndexConfig::max_clone_bytes`].
    pub max_clone_bytes: String,
}

impl Default for LimitNames {
    fn default() -> Self {
        Self {
            max_total_bytes: "PatternIndexConfig::files.max_total_bytes".into(),
            max_files: "PatternIndexConfig::files.max_files".into(),
            max_chunks: "PatternIndexConfig::max_chunks".into(),
            max_clone_bytes: "PatternIndexConfig::max_clone_bytes".into(),
        }
    }
}

/// Settings of a [`PatternIndex`].
#[derive(Debug, Clone)]
pub struct PatternIndexConfig {
    /// The collection chunks live in.
    pub collection: String,
    /// Texts per embedding request.
    pub batch_size: usize,
    /// Chunk sizes.
    pub chunking: ChunkConfig,
    /// Which files are read, and how much in all ([`FileRules`]: at most 20,000 files and
    /// 64 MiB by default).
    pub files: FileRules,
    /// At most this many chunks per repository. Every chunk, then its vector, is held in
    /// memory until the one final write, so this bounds an indexing run's memory: a repository
    /// with more fails with [`MemoryError::IndexTooLarge`] and nothing is stored. Default
    /// 50,000 (about 75 MB of 384-dimensional vectors besides the text).
    pub max_chunks: usize,
    /// How long a clone may take.
    pub clone_timeout: Duration,
    /// The most bytes a clone may take on disk (its `.git` folder and checked-out files, each
    /// file and folder counted as one 4 KiB block at least): past it git is stopped, the partial clone removed, and indexing fails with
    /// [`MemoryError::IndexTooLarge`] naming this setting ([`crate::repo::fetch_bounded`]). A
    /// local directory is read where it is and bounded by [`FileRules`] alone. Default 4 GiB
    /// ([`crate::repo::DEFAULT_MAX_CLONE_BYTES`]).
    pub max_clone_bytes: u64,
    /// The settings an `index_too_large` error names.
    pub limit_names: LimitNames,
    /// How [`PatternIndex::search`] ranks.
    pub search: SearchMode,
    /// Whether a chunk's vector also reads its summary ([`crate::chunk::Chunk::summary_text`]:
    /// the enclosing names, each item's signature and documentation): the chunk's code and its
    /// summary are embedded apart and the normalised sum of the two vectors is stored, so a short
    /// item's doc weighs as much as its body. One vector per chunk, the same on every store.
    /// Off by default: `benches/benches/memory_retrieval.rs` (row `ts-merged+outline+summary`)
    /// measured it behind on both of its code bases (figures in `benches/README.md`).
    pub summaries: bool,
}

impl Default for PatternIndexConfig {
    fn default() -> Self {
        Self {
            collection: "pattern_examples".into(),
            batch_size: 32,
            chunking: ChunkConfig::default(),
            files: FileRules::default(),
            max_chunks: 50_000,
            clone_timeout: Duration::from_secs(300),
            max_clone_bytes: crate::repo::DEFAULT_MAX_CLONE_BYTES,
            limit_names: LimitNames::default(),
            search: SearchMode::default(),
            summaries: false,
        }
    }
}

/// Whether `source` (as stored with an index) is a URL whose user part or query
/// [`redact_url`] hid, so that it cannot be fetched as it is.
fn credentials_not_stored(source: &str) -> bool {
    let source = source.trim();
    source.contains("://***@") || source.ends_with("?***") || source.ends_with("#***")
}

/// Pattern-example indexing and search over any store and embedder.
#[derive(Clone)]
pub struct PatternIndex {
    store: Arc<dyn VectorStore>,
    embedder: Arc<dyn Embedder>,
    config: PatternIndexConfig,
    credentials: Option<Arc<dyn GitCredentials>>,
}

impl std::fmt::Debug for PatternIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatternIndex")
            .field("store", &self.store.backend())
            .field("model", &self.embedder.model())
            .field("collection", &self.config.collection)
            .field("credentials", &self.credentials.is_some())
            .finish()
    }
}

fn check_tag(what: &str, tag: &str) -> Result<()> {
    if tag.trim().is_empty() {
        return Err(MemoryError::InvalidInput(format!(
            "{what} must not be empty"
        )));
    }
    // Characters, as the rules document counts them (a tag there is one line of at most 200).
    if tag.chars().count() > 200 {
        return Err(MemoryError::InvalidInput(format!(
            "{what} must be at most 200 characters"
        )));
    }
    // One line, as the rules document holds it: a tag with a control character or a line
    // separator names no example, and is not quoted back (an `unknown_tag` would carry its
    // ESC sequences and line breaks to a terminal and a log line).
    if tag
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        return Err(MemoryError::InvalidInput(format!(
            "{what} must be one line, without control characters"
        )));
    }
    Ok(())
}

fn text(p: &Payload, key: &str) -> String {
    p.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl PatternIndex {
    /// An index over `store` with `embedder`, default settings.
    pub fn new(store: Arc<dyn VectorStore>, embedder: Arc<dyn Embedder>) -> Self {
        Self::with_config(store, embedder, PatternIndexConfig::default())
    }

    /// An index with explicit settings.
    pub fn with_config(
        store: Arc<dyn VectorStore>,
        embedder: Arc<dyn Embedder>,
        config: PatternIndexConfig,
    ) -> Self {
        Self {
            store,
            embedder,
            config,
            credentials: None,
        }
    }

    /// Clones of network repositories take their credential from `credentials` (see
    /// [`GitCredentials`]), unless their URL carries one of its own.
    pub fn with_git_credentials(mut self, credentials: Arc<dyn GitCredentials>) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The settings.
    pub fn config(&self) -> &PatternIndexConfig {
        &self.config
    }

    async fn ensure(&self) -> Result<()> {
        self.store
            .ensure_collection(
                &self.config.collection,
                CollectionConfig::cosine(self.embedder.dimension()),
            )
            .await
    }

    /// Indexes `repo` (or re-indexes it: its tag's chunks are replaced atomically).
    pub async fn index(&self, repo: &ExampleRepo, progress: &dyn Progress) -> Result<IndexReport> {
        check_tag("reference_tag", &repo.reference_tag)?;
        check_tag("arch_tag", &repo.arch_tag)?;
        self.ensure().await?;
        progress
            .report(ProgressEvent::Fetching {
                source: redact_url(&repo.url),
            })
            .await;
        let auth = match &self.credentials {
            Some(c) if wants_credential(&repo.url) => {
                // The owner's lookup may read a database: off the async workers.
                let (c, url, tag) = (Arc::clone(c), repo.url.clone(), repo.reference_tag.clone());
                tokio::task::spawn_blocking(move || c.for_clone(&url, &tag))
                    .await
                    .map_err(|e| MemoryError::stopped("the credential lookup", &e))??
            }
            _ => None,
        };
        let checkout = fetch_bounded_named(
            &repo.url,
            auth.as_ref(),
            self.config.clone_timeout,
            self.config.max_clone_bytes,
            &self.config.limit_names,
        )
        .await?;
        let root = checkout.root().to_path_buf();
        let rules = self.config.files.clone();
        let mut chunking = self.config.chunking;
        chunking.max_tokens = chunking.max_tokens.min(self.embedder.max_input_tokens());
        let max_chunks = self.config.max_chunks;
        let names = self.config.limit_names.clone();
        let shown = redact_url(&repo.url);
        let embedder = Arc::clone(&self.embedder);
        let (files, chunks) = tokio::task::spawn_blocking(move || -> Result<_> {
            // One file's text at a time: what stays is its chunks, bounded by the byte and
            // chunk limits (a repository cut short fails: a partial index would pass for whole).
            let count = |t: &str| embedder.count_tokens(t);
            let (mut files, mut chunks) = (0, Vec::new());
            let mut walk = source_files(&root, &rules)?;
            for f in walk.by_ref() {
                files += 1;
                for c in chunk_file(&f.path, &f.text, &chunking, &count) {
                    if chunks.len() >= max_chunks {
                        return Err(MemoryError::too_many_chunks(shown, max_chunks, &names));
                    }
                    chunks.push((f.path.clone(), c));
                }
            }
            if let Some(file) = walk.unsafe_ignore_file() {
                return Err(MemoryError::unsafe_ignore_file(shown, &file));
            }
            if walk.over_byte_limit() {
                return Err(MemoryError::too_many_bytes(
                    shown,
                    rules.max_total_bytes,
                    &names,
                ));
            }
            if walk.over_file_limit() {
                return Err(MemoryError::too_many_files(shown, rules.max_files, &names));
            }
            Ok((files, chunks))
        })
        .await
        .map_err(|e| MemoryError::stopped("the chunking worker", &e))??;
        drop(checkout);
        if chunks.is_empty() {
            // Shown as every other error names a source: the user part (a private
            // repository's token) and the query hidden, so no caller can pass it on.
            return Err(MemoryError::NothingToIndex {
                source_repo: redact_url(&repo.url),
            });
        }
        progress
            .report(ProgressEvent::Chunked {
                files,
                chunks: chunks.len(),
            })
            .await;
        let total = chunks.len();
        let mut vectors = Vec::with_capacity(total);
        for batch in chunks.chunks(self.config.batch_size.max(1)) {
            // The path and the containers' headers give the model context the snippet alone
            // lacks; the chunker sized them to fit, `fit_input` makes sure of it.
            let mut texts: Vec<String> = batch
                .iter()
                .map(|(p, c)| fit_input(self.embedder.as_ref(), &c.embedding_text(p)))
                .collect();
            // Each chunk's summary, when it has one, is embedded in the same request, after
            // the code texts: `summary_of[i]` is its index in `texts`.
            let mut summary_of = vec![None; batch.len()];
            if self.config.summaries {
                for (i, (p, c)) in batch.iter().enumerate() {
                    if let Some(s) = c.summary_text(p) {
                        summary_of[i] = Some(texts.len());
                        texts.push(fit_input(self.embedder.as_ref(), &s));
                    }
                }
            }
            let v = self.embedder.embed(&texts).await?;
            super::embed::check_vectors(self.embedder.dimension(), texts.len(), &v)?;
            vectors.extend(summary_of.iter().enumerate().map(|(i, s)| match s {
                Some(s) => sum_normalised(&v[i], &v[*s]),
                None => v[i].clone(),
            }));
            progress
                .report(ProgressEvent::Embedded {
                    done: vectors.len(),
                    total,
                })
                .await;
        }
        let last_indexed = rfc3339(unix_now());
        // Stored as shown: a token in the URL stays out of the store.
        let source = redact_url(&repo.url);
        let points: Vec<Point> = chunks
            .into_iter()
            .zip(vectors)
            .enumerate()
            .map(|(n, ((path, c), vector))| {
                let mut payload = Payload::new();
                payload.insert("reference_tag".into(), json!(repo.reference_tag));
                payload.insert("arch_tag".into(), json!(repo.arch_tag));
                payload.insert("source_repo".into(), json!(source));
                payload.insert("file_path".into(), json!(path));
                payload.insert("chunk_type".into(), json!(c.chunk_type.as_str()));
                payload.insert("context".into(), json!(c.context_path()));
                payload.insert("start_line".into(), json!(c.start_line));
                payload.insert("end_line".into(), json!(c.end_line));
                if let Some(l) = Language::of_path(&path) {
                    payload.insert("language".into(), json!(l.as_str()));
                }
                payload.insert("last_indexed".into(), json!(last_indexed));
                payload.insert("embedding_model".into(), json!(self.embedder.model()));
                payload.insert("text".into(), json!(c.text));
                Point {
                    id: stable_id(&[
                        &repo.reference_tag,
                        &path,
                        &c.start_line.to_string(),
                        &n.to_string(),
                    ]),
                    vector,
                    payload,
                }
            })
            .collect();
        let count = points.len();
        progress
            .report(ProgressEvent::Storing { chunks: count })
            .await;
        let replaced = self
            .store
            .replace(
                &self.config.collection,
                &Filter::eq("reference_tag", repo.reference_tag.as_str()),
                points,
            )
            .await?;
        tracing::info!(tag = %repo.reference_tag, files, chunks = count, replaced, "indexed pattern example");
        Ok(IndexReport {
            reference_tag: repo.reference_tag.clone(),
            arch_tag: repo.arch_tag.clone(),
            source_repo: source,
            files,
            chunks: count,
            replaced,
            last_indexed,
        })
    }

    /// The example stored under `reference_tag`, read back from its chunks: its source as
    /// stored, a URL's user part and query shown as `***`.
    pub async fn example(&self, reference_tag: &str) -> Result<ExampleRepo> {
        check_tag("reference_tag", reference_tag)?;
        if self
            .store
            .collection(&self.config.collection)
            .await?
            .is_none()
        {
            return Err(MemoryError::UnknownTag(reference_tag.to_string()));
        }
        let (first, _) = self
            .store
            .scroll(
                &self.config.collection,
                Some(&Filter::eq("reference_tag", reference_tag)),
                None,
                1,
            )
            .await?;
        let r = first
            .into_iter()
            .next()
            .ok_or_else(|| MemoryError::UnknownTag(reference_tag.to_string()))?;
        Ok(ExampleRepo {
            url: text(&r.payload, "source_repo"),
            reference_tag: reference_tag.to_string(),
            arch_tag: text(&r.payload, "arch_tag"),
        })
    }

    /// Re-runs fetch → chunk → embed → store for a tag already indexed, from the source recorded
    /// with it. An unknown tag answers [`MemoryError::UnknownTag`]; a source whose credentials
    /// (a URL's user part or query) were not stored answers [`MemoryError::RepoUnavailable`]
    /// saying so (a lasting one: refreshing again cannot help), and is refreshed by indexing it
    /// again from its full URL.
    pub async fn refresh(
        &self,
        reference_tag: &str,
        progress: &dyn Progress,
    ) -> Result<IndexReport> {
        let repo = self.example(reference_tag).await?;
        if credentials_not_stored(&repo.url) {
            return Err(MemoryError::RepoUnavailable {
                source_repo: redact_url(&repo.url),
                reason: "its URL carried credentials, which are not stored with the index; index it again from its full URL, or keep the credential for its site instead of in the URL".into(),
                lasting: true,
            });
        }
        self.index(&repo, progress).await
    }

    /// Search, optionally within one pattern, ranked the configured way
    /// ([`PatternIndexConfig::search`]).
    pub async fn search(
        &self,
        query: &str,
        arch_tag: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PatternHit>> {
        self.search_with(query, arch_tag, limit, self.config.search)
            .await
    }

    /// Search ranked by `mode`.
    pub async fn search_with(
        &self,
        query: &str,
        arch_tag: Option<&str>,
        limit: usize,
        mode: SearchMode,
    ) -> Result<Vec<PatternHit>> {
        if query.trim().is_empty() {
            return Err(MemoryError::InvalidInput(
                "the query must not be empty".into(),
            ));
        }
        // Bounded as a recall's query is: its words are looked up in the keyword index and it
        // is counted in tokens, all on the caller's request.
        let max = crate::session::MAX_TEXT_CHARS;
        if query.chars().count() > max {
            return Err(MemoryError::InvalidInput(format!(
                "`query` must be at most {max} characters"
            )));
        }
        if self
            .store
            .collection(&self.config.collection)
            .await?
            .is_none()
        {
            return Ok(Vec::new());
        }
        let v = self
            .embedder
            .embed(&[fit_input(self.embedder.as_ref(), query)])
            .await?;
        super::embed::check_vectors(self.embedder.dimension(), 1, &v)?;
        let filter = arch_tag
            .filter(|t| !t.is_empty())
            .map(|t| Filter::eq("arch_tag", t));
        let limit = limit.clamp(1, 100);
        // Parts of one long item (a doc comment cut in three, a section windowed) say the same
        // thing and would crowd the list: ask for more and keep the best part of each item.
        let hits = search_store(
            self.store.as_ref(),
            &self.config.collection,
            mode,
            &v[0],
            query,
            filter.as_ref(),
            limit * PARTS_PER_ITEM,
        )
        .await?;
        // Vectors of another model rank by meaningless similarities: refused, not ranked.
        if let Some(indexed) = hits.iter().find_map(|h| {
            h.payload
                .get("embedding_model")
                .and_then(Value::as_str)
                .filter(|m| *m != self.embedder.model())
        }) {
            return Err(MemoryError::ModelMismatch {
                indexed: indexed.to_string(),
                current: self.embedder.model().to_string(),
                remedy: "refresh_pattern_example, for each reference tag".into(),
            });
        }
        Ok(best_part_of_each_item(hits, limit)
            .into_iter()
            .map(|h| {
                let p = &h.payload;
                PatternHit {
                    file_path: text(p, "file_path"),
                    start_line: p.get("start_line").and_then(Value::as_u64).unwrap_or(0),
                    end_line: p.get("end_line").and_then(Value::as_u64).unwrap_or(0),
                    chunk_type: text(p, "chunk_type"),
                    context: text(p, "context"),
                    score: h.score,
                    reference_tag: text(p, "reference_tag"),
                    arch_tag: text(p, "arch_tag"),
                    source_repo: redact_url(&text(p, "source_repo")),
                    snippet: text(p, "text"),
                }
            })
            .collect())
    }

    /// Removes a tag's chunks; returns how many. An unknown tag answers
    /// [`MemoryError::UnknownTag`].
    pub async fn purge(&self, reference_tag: &str) -> Result<u64> {
        check_tag("reference_tag", reference_tag)?;
        if self
            .store
            .collection(&self.config.collection)
            .await?
            .is_none()
        {
            return Err(MemoryError::UnknownTag(reference_tag.to_string()));
        }
        let n = self
            .store
            .delete(
                &self.config.collection,
                &Filter::eq("reference_tag", reference_tag),
            )
            .await?;
        if n == 0 {
            return Err(MemoryError::UnknownTag(reference_tag.to_string()));
        }
        Ok(n)
    }

    /// A page of the stored chunks matching `filter`, in id order (a stable order: a page
    /// boundary does not move while other examples are indexed), from id `start` on
    /// (inclusive; `None` for the first page), at most `limit` (1 to [`MAX_CHUNK_PAGE`]).
    pub async fn chunks(
        &self,
        filter: &ChunkFilter,
        start: Option<u64>,
        limit: usize,
    ) -> Result<ChunkPage> {
        if limit == 0 || limit > MAX_CHUNK_PAGE {
            return Err(MemoryError::InvalidInput(format!(
                "a page holds 1 to {MAX_CHUNK_PAGE} chunks"
            )));
        }
        if self
            .store
            .collection(&self.config.collection)
            .await?
            .is_none()
        {
            return Ok(ChunkPage {
                items: Vec::new(),
                next: None,
            });
        }
        let mut f = Filter::all();
        if !filter.reference_tags.is_empty() {
            f = f.and(Condition::MatchAny {
                key: "reference_tag".into(),
                any: filter
                    .reference_tags
                    .iter()
                    .map(|t| t.as_str().into())
                    .collect(),
            });
        }
        for (key, value) in [
            ("arch_tag", &filter.arch_tag),
            ("chunk_type", &filter.chunk_type),
            ("file_path", &filter.file_path),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                f = f.and_eq(key, v);
            }
        }
        let (records, next) = self
            .store
            .scroll(&self.config.collection, Some(&f), start, limit)
            .await?;
        let items = records
            .into_iter()
            .map(|r| {
                let p = &r.payload;
                IndexedChunk {
                    id: r.id,
                    reference_tag: text(p, "reference_tag"),
                    arch_tag: text(p, "arch_tag"),
                    source_repo: redact_url(&text(p, "source_repo")),
                    file_path: text(p, "file_path"),
                    start_line: p.get("start_line").and_then(Value::as_u64).unwrap_or(0),
                    end_line: p.get("end_line").and_then(Value::as_u64).unwrap_or(0),
                    chunk_type: text(p, "chunk_type"),
                    context: text(p, "context"),
                    language: p
                        .get("language")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    last_indexed: text(p, "last_indexed"),
                    snippet: text(p, "text"),
                }
            })
            .collect();
        Ok(ChunkPage { items, next })
    }

    /// Every indexed example with its chunk count, sorted by tag.
    pub async fn examples(&self) -> Result<Vec<IndexedExample>> {
        if self
            .store
            .collection(&self.config.collection)
            .await?
            .is_none()
        {
            return Ok(Vec::new());
        }
        let mut by_tag: std::collections::BTreeMap<String, IndexedExample> = Default::default();
        // A store whose paging does not advance fails the listing instead of looping.
        let mut pages = Pages::new(&self.config.collection);
        loop {
            let (page, next) = self
                .store
                .scroll(&self.config.collection, None, pages.offset(), 1000)
                .await?;
            let more = pages.check(&page, next)?;
            for r in page {
                let tag = text(&r.payload, "reference_tag");
                let e = by_tag.entry(tag.clone()).or_insert_with(|| IndexedExample {
                    reference_tag: tag,
                    arch_tag: text(&r.payload, "arch_tag"),
                    source_repo: redact_url(&text(&r.payload, "source_repo")),
                    chunks: 0,
                    last_indexed: text(&r.payload, "last_indexed"),
                });
                e.chunks += 1;
            }
            if !more {
                break;
            }
        }
        Ok(by_tag.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ScoredPoint;

    fn hit(id: u64, tag: &str, file: &str, context: &str) -> ScoredPoint {
        let mut payload = Payload::new();
        payload.insert("reference_tag".into(), json!(tag));
        payload.insert("file_path".into(), json!(file));
        payload.insert("context".into(), json!(context));
        ScoredPoint {
            id,
            score: 1.0 / id as f32,
            payload,
        }
    }

    #[test]
    fn only_the_best_part_of_an_item_is_listed() {
        let hits = vec![
            hit(1, "t", "src/lib.rs", "pub struct Version"),
            hit(2, "t", "src/lib.rs", "pub struct Version"),
            hit(3, "t", "src/lib.rs", ""),
            hit(4, "t", "src/lib.rs", ""),
            hit(5, "t", "src/parse.rs", "pub struct Version"),
            hit(6, "u", "src/lib.rs", "pub struct Version"),
            hit(7, "t", "src/lib.rs", "impl Version > fn parse"),
        ];
        let ids = |v: Vec<ScoredPoint>| v.into_iter().map(|h| h.id).collect::<Vec<_>>();
        // The second part of `Version` goes; context-less blocks, another file's and another
        // example's item of the same name stay.
        assert_eq!(
            ids(best_part_of_each_item(hits.clone(), 10)),
            [1, 3, 4, 5, 6, 7]
        );
        assert_eq!(ids(best_part_of_each_item(hits, 3)), [1, 3, 4]);
        assert!(best_part_of_each_item(Vec::new(), 5).is_empty());
    }
}
