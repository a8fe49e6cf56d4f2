//! The Qdrant backend (feature `qdrant`): the same [`VectorStore`] over a Qdrant server (gRPC).
//!
//! Chosen at the edge with `QDRANT_URL` (and `QDRANT_API_KEY`); this module only takes a typed
//! [`QdrantConfig`]. Filters translate one to one ([`Filter`]'s model *is* Qdrant's), ids are
//! Qdrant's unsigned integer ids, and payloads are JSON objects both ways, so data written through
//! the embedded store reads the same here.
//!
//! One difference a user can observe: Qdrant has no multi-operation transaction, so
//! [`VectorStore::replace`] upserts the new points first (waiting for them to be applied) and then
//! deletes the old ones that were not overwritten. A concurrent search never sees *nothing*, but
//! during that short window it can see old and new points together. The embedded store has no
//! such window. Points go in requests of at most [`UPSERT_BATCH_POINTS`] (a source's refresh
//! can hold 50,000, far more than one request carries within the client's timeout); a request
//! that fails stops the upsert, and its error says how many points were stored before it. A
//! replacement that stops so deletes nothing: the old points stay searchable, those whose id a
//! stored new point took holding the new version, and the error says so. Old points are
//! deleted in requests of at most [`DELETE_BATCH_IDS`] ids the same way.
//!
//! Hybrid search: each collection has, beside its unnamed dense vector, a sparse vector named
//! [`KEYWORD_VECTOR`] with Qdrant's IDF modifier, filled at upsert with the term frequencies of
//! the point's keyword text ([`keywords::sparse_terms`], the same terms the embedded store's BM25
//! reads). [`VectorStore::search_hybrid`] runs a dense and a sparse query and fuses the two
//! rankings with the embedded store's own weighted reciprocal rank fusion ([`keywords::fuse`]),
//! so moving from the embedded store changes nothing for the user. A collection created before this existed has no sparse vector; re-create it
//! (re-index) to search it hybrid.
//!
//! Errors reach the model, logs and the admin API, so what they quote of the gRPC client's
//! error (a status message from the server or a proxy in front of it, the response headers the
//! client shows with it, a connection failure that names the URL) has every credential the
//! requests carry replaced by `[redacted]`: the API key, the URL's user part and query values,
//! and the `Basic` value made of the user part (kberg-core's [`UrlCredentials`], as the
//! embedders quote their error answers). Neither `Debug` shows the key or the URL's
//! credentials.

use std::collections::HashMap;
use std::sync::RwLock;

use async_trait::async_trait;
use kberg_core::{UrlCredentials, redact_url};
use qdrant_client::Qdrant;
use qdrant_client::qdrant::{
    self, CountPointsBuilder, CreateCollectionBuilder, DeletePointsBuilder, NamedVectors,
    PointStruct, PointsIdsList, Query, QueryPointsBuilder, ScrollPointsBuilder,
    SparseVectorParamsBuilder, SparseVectorsConfigBuilder, UpsertPointsBuilder, Vector,
    VectorInput, VectorParamsBuilder,
};

use super::keywords::{self, keyword_text, sparse_terms};
use super::{
    CollectionConfig, Condition, Distance, Filter, MatchValue, Pages, Payload, Point, PointId,
    Record, ScoredPoint, VectorStore,
};
use crate::error::{MemoryError, Result};
use crate::scrub;

/// The name of the sparse vector that carries each point's keyword terms.
pub const KEYWORD_VECTOR: &str = "keywords";

/// How to reach Qdrant. Its `Debug` shows the URL without its user part and query, and
/// whether there is an API key, never the key.
#[derive(Clone)]
pub struct QdrantConfig {
    /// The gRPC URL, e.g. `http://127.0.0.1:6334`.
    pub url: String,
    /// The API key, if the server requires one.
    pub api_key: Option<String>,
    /// A prefix for collection names, so several deployments can share one server.
    pub collection_prefix: String,
}

impl std::fmt::Debug for QdrantConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantConfig")
            .field("url", &redact_url(&self.url))
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("collection_prefix", &self.collection_prefix)
            .finish()
    }
}

impl QdrantConfig {
    /// A config for `url`, no key, no prefix.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            api_key: None,
            collection_prefix: String::new(),
        }
    }
}

/// The sparse keyword vector of every collection, weighted by Qdrant's IDF.
fn sparse_config() -> SparseVectorsConfigBuilder {
    let mut c = SparseVectorsConfigBuilder::default();
    c.add_named_vector_params(
        KEYWORD_VECTOR,
        SparseVectorParamsBuilder::default().modifier(qdrant::Modifier::Idf as i32),
    );
    c
}

/// A [`VectorStore`] on a Qdrant server. Its `Debug` shows the URL without its user part and
/// query, never the API key.
pub struct QdrantStore {
    client: Qdrant,
    /// The URL as `Debug` shows it.
    shown: String,
    /// What an error must not quote: the key, the URL's user part and query values, and the
    /// Basic credential made of the user part.
    credentials: UrlCredentials,
    prefix: String,
    configs: RwLock<HashMap<String, CollectionConfig>>,
}

impl std::fmt::Debug for QdrantStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantStore")
            .field("url", &self.shown)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// How much of the client's error text an error quotes, in characters: a status's code and
/// message come first, then the response headers the client shows with them.
const MAX_QUOTED_CHARS: usize = 1000;

/// A store error quoting `e` (the gRPC client's error, or a sentence naming what the server
/// holds) with every credential in `credentials` replaced.
fn store_err(credentials: &UrlCredentials, e: impl std::fmt::Display) -> MemoryError {
    MemoryError::Store(format!(
        "qdrant: {}",
        scrub::quote(credentials, &e.to_string(), MAX_QUOTED_CHARS)
    ))
}

fn match_condition(key: &str, v: &MatchValue) -> qdrant::Condition {
    match v {
        MatchValue::Keyword(s) => qdrant::Condition::matches(key, s.clone()),
        MatchValue::Integer(i) => qdrant::Condition::matches(key, *i),
        MatchValue::Bool(b) => qdrant::Condition::matches(key, *b),
    }
}

fn condition(c: &Condition) -> qdrant::Condition {
    match c {
        Condition::Match { key, value } => match_condition(key, value),
        Condition::MatchAny { key, any } => qdrant::Condition::from(qdrant::Filter::should(
            any.iter().map(|v| match_condition(key, v)),
        )),
        Condition::HasId(ids) => qdrant::Condition::has_id(ids.iter().copied()),
        Condition::Nested(f) => qdrant::Condition::from(filter(f)),
    }
}

fn filter(f: &Filter) -> qdrant::Filter {
    qdrant::Filter {
        must: f.must.iter().map(condition).collect(),
        should: f.should.iter().map(condition).collect(),
        must_not: f.must_not.iter().map(condition).collect(),
        ..Default::default()
    }
}

fn num_id(id: Option<qdrant::PointId>) -> Option<PointId> {
    match id?.point_id_options? {
        qdrant::point_id::PointIdOptions::Num(n) => Some(n),
        qdrant::point_id::PointIdOptions::Uuid(_) => None,
    }
}

fn json_payload(p: HashMap<String, qdrant::Value>) -> Payload {
    qdrant_client::Payload::from(p).into()
}

/// The most points one upsert request carries. A refresh replaces every chunk of a source (up
/// to 50,000) and the client gives each request 5 s: all of them in one request is tens of MiB
/// for the server to take in and index before it answers, which a large source does not make
/// in time. 512 points are a few MiB at most (a 4,096-dimension vector is 16 KiB, a chunk's
/// payload a few KiB), applied well within the timeout.
pub const UPSERT_BATCH_POINTS: usize = 512;

/// The point as Qdrant's wire writes it: the unnamed dense vector, the sparse keyword vector
/// and the payload.
fn point_struct(p: Point) -> PointStruct {
    let (indices, values): (Vec<u32>, Vec<f32>) =
        sparse_terms(&keyword_text(&p.payload)).into_iter().unzip();
    // "" is Qdrant's name for the unnamed (default) dense vector.
    let vectors = NamedVectors::default()
        .add_vector("", Vector::new_dense(p.vector))
        .add_vector(KEYWORD_VECTOR, Vector::new_sparse(indices, values));
    PointStruct::new(p.id, vectors, qdrant_client::Payload::from(p.payload))
}

/// The most point ids one delete request names. A refresh that replaces a large source
/// deletes up to 50,000 old points; in one request, with the server waiting until they are
/// gone before it answers, that does not make the client's 5 s timeout. 4,096 ids are some
/// 40 KB on the wire, applied well within it.
pub const DELETE_BATCH_IDS: usize = 4096;

/// A deletion that stopped at a failed request: how many of its ids were deleted before it.
struct Deleted {
    deleted: usize,
    total: usize,
    /// The failed request's error, credentials replaced.
    error: MemoryError,
}

/// An upsert that stopped at a failed request: how many of its points were stored before it.
struct Upserted {
    stored: usize,
    total: usize,
    /// The failed request's error, credentials replaced.
    error: MemoryError,
}

impl Upserted {
    /// The error of a plain upsert: what failed and how many points were stored before it.
    fn into_error(self) -> MemoryError {
        let Upserted {
            stored,
            total,
            error,
        } = self;
        MemoryError::Store(format!(
            "{stored} of {total} points were stored (in requests of {UPSERT_BATCH_POINTS}) \
             before a request failed, and no later request was sent: {}",
            without_prefix(&error)
        ))
    }
}

/// What a [`MemoryError::Store`] says after its `the vector store failed: ` (the `qdrant: ...`
/// of [`store_err`]), so that an error built around it says that once.
fn without_prefix(e: &MemoryError) -> String {
    match e {
        MemoryError::Store(inner) => inner.clone(),
        other => other.to_string(),
    }
}

impl QdrantStore {
    /// Connects (lazily: the first call reaches the server).
    pub fn connect(config: QdrantConfig) -> Result<Self> {
        // The gRPC client sends the key as the `api-key` header, and names the URL as
        // configured (user part and query included) when it cannot connect.
        let credentials = scrub::credentials(&[&config.url], config.api_key.as_deref());
        // No version check as the client is built: it would reach the server at once (and
        // block the caller on it), and the client prints its verdict to standard output, which
        // an embedding program may use for something else (an MCP server over stdio speaks
        // there).
        let mut b = Qdrant::from_url(&config.url).skip_compatibility_check();
        if let Some(k) = &config.api_key {
            b = b.api_key(k.clone());
        }
        let client = b.build().map_err(|e| store_err(&credentials, e))?;
        Ok(Self {
            client,
            shown: redact_url(&config.url),
            credentials,
            prefix: config.collection_prefix,
            configs: RwLock::new(HashMap::new()),
        })
    }

    /// A store error quoting `e` without the credentials the store's requests carry.
    fn err(&self, e: impl std::fmt::Display) -> MemoryError {
        store_err(&self.credentials, e)
    }

    fn name(&self, collection: &str) -> String {
        format!("{}{collection}", self.prefix)
    }

    async fn config(&self, collection: &str) -> Result<CollectionConfig> {
        if let Some(c) = self
            .configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(collection)
        {
            return Ok(*c);
        }
        let c = self
            .fetch_config(collection)
            .await?
            .ok_or_else(|| MemoryError::UnknownCollection(collection.to_string()))?;
        self.configs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(collection.to_string(), c);
        Ok(c)
    }

    async fn fetch_config(&self, collection: &str) -> Result<Option<CollectionConfig>> {
        let name = self.name(collection);
        if !self
            .client
            .collection_exists(&name)
            .await
            .map_err(|e| self.err(e))?
        {
            return Ok(None);
        }
        let info = self
            .client
            .collection_info(&name)
            .await
            .map_err(|e| self.err(e))?;
        let params = info
            .result
            .and_then(|r| r.config)
            .and_then(|c| c.params)
            .and_then(|p| p.vectors_config)
            .and_then(|v| v.config);
        match params {
            Some(qdrant::vectors_config::Config::Params(p)) => {
                let distance = match qdrant::Distance::try_from(p.distance) {
                    Ok(qdrant::Distance::Cosine) => Distance::Cosine,
                    Ok(qdrant::Distance::Dot) => Distance::Dot,
                    other => {
                        return Err(self.err(format!(
                            "collection `{name}` uses distance {other:?}, which memory does not use"
                        )));
                    }
                };
                Ok(Some(CollectionConfig {
                    dimension: p.size as usize,
                    distance,
                }))
            }
            _ => Err(self.err(format!(
                "collection `{name}` has named vectors; memory uses one unnamed vector"
            ))),
        }
    }

    fn check(config: CollectionConfig, vector: &[f32]) -> Result<()> {
        if vector.len() != config.dimension {
            return Err(MemoryError::DimensionMismatch {
                expected: config.dimension,
                actual: vector.len(),
            });
        }
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(MemoryError::InvalidInput(
                "a vector has a NaN or infinite component".into(),
            ));
        }
        Ok(())
    }

    /// Upserts `points` (checked against the collection) in requests of at most
    /// [`UPSERT_BATCH_POINTS`], each waited for, stopping at the first that fails: its error
    /// says how many of the points were stored before it ([`Upserted`]).
    async fn upsert_checked(
        &self,
        collection: &str,
        points: Vec<Point>,
    ) -> std::result::Result<(), Upserted> {
        let total = points.len();
        let mut points = points.into_iter();
        let mut stored = 0;
        loop {
            let batch: Vec<PointStruct> = points
                .by_ref()
                .take(UPSERT_BATCH_POINTS)
                .map(point_struct)
                .collect();
            if batch.is_empty() {
                return Ok(());
            }
            let n = batch.len();
            self.client
                .upsert_points(UpsertPointsBuilder::new(self.name(collection), batch).wait(true))
                .await
                .map_err(|e| Upserted {
                    stored,
                    total,
                    error: self.err(e),
                })?;
            stored += n;
        }
    }

    async fn ids_matching(&self, collection: &str, f: &Filter) -> Result<Vec<PointId>> {
        let mut ids = Vec::new();
        // A server whose next page offset does not advance would loop here forever.
        let mut pages = Pages::new(collection);
        loop {
            let (page, next) = self
                .scroll(collection, Some(f), pages.offset(), 1000)
                .await?;
            let more = pages.check(&page, next)?;
            ids.extend(page.into_iter().map(|r| r.id));
            if !more {
                return Ok(ids);
            }
        }
    }

    /// Deletes the points `ids` in requests of at most [`DELETE_BATCH_IDS`], each waited for,
    /// stopping at the first that fails: its error says how many were deleted before it.
    async fn delete_ids(
        &self,
        collection: &str,
        ids: Vec<PointId>,
    ) -> std::result::Result<(), Deleted> {
        let total = ids.len();
        let mut deleted = 0;
        for batch in ids.chunks(DELETE_BATCH_IDS) {
            let list = PointsIdsList {
                ids: batch.iter().copied().map(Into::into).collect(),
            };
            self.client
                .delete_points(
                    DeletePointsBuilder::new(self.name(collection))
                        .points(list)
                        .wait(true),
                )
                .await
                .map_err(|e| Deleted {
                    deleted,
                    total,
                    error: self.err(e),
                })?;
            deleted += batch.len();
        }
        Ok(())
    }
}

#[async_trait]
impl VectorStore for QdrantStore {
    fn backend(&self) -> &'static str {
        "qdrant"
    }

    async fn ensure_collection(&self, name: &str, config: CollectionConfig) -> Result<()> {
        if name.is_empty() || config.dimension == 0 {
            return Err(MemoryError::InvalidInput(
                "a collection needs a name and a dimension".into(),
            ));
        }
        if let Some(existing) = self.fetch_config(name).await? {
            return if existing == config {
                self.configs
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), existing);
                Ok(())
            } else {
                Err(MemoryError::CollectionMismatch {
                    name: name.to_string(),
                    existing: existing.to_string(),
                    requested: config.to_string(),
                })
            };
        }
        let distance = match config.distance {
            Distance::Cosine => qdrant::Distance::Cosine,
            Distance::Dot => qdrant::Distance::Dot,
        };
        self.client
            .create_collection(
                CreateCollectionBuilder::new(self.name(name))
                    .vectors_config(VectorParamsBuilder::new(config.dimension as u64, distance))
                    .sparse_vectors_config(sparse_config()),
            )
            .await
            .map_err(|e| self.err(e))?;
        self.configs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), config);
        Ok(())
    }

    async fn collection(&self, name: &str) -> Result<Option<CollectionConfig>> {
        self.fetch_config(name).await
    }

    async fn drop_collection(&self, name: &str) -> Result<bool> {
        self.configs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let full = self.name(name);
        if !self
            .client
            .collection_exists(&full)
            .await
            .map_err(|e| self.err(e))?
        {
            return Ok(false);
        }
        self.client
            .delete_collection(full)
            .await
            .map_err(|e| self.err(e))?;
        Ok(true)
    }

    async fn upsert(&self, collection: &str, points: Vec<Point>) -> Result<()> {
        let config = self.config(collection).await?;
        for p in &points {
            Self::check(config, &p.vector)?;
        }
        self.upsert_checked(collection, points)
            .await
            .map_err(Upserted::into_error)
    }

    async fn delete(&self, collection: &str, f: &Filter) -> Result<u64> {
        self.config(collection).await?;
        let ids = self.ids_matching(collection, f).await?;
        let n = ids.len() as u64;
        self.delete_ids(collection, ids).await.map_err(|failed| {
            MemoryError::Store(format!(
                "{} of {} points were deleted (in requests of {DELETE_BATCH_IDS}) before a \
                 request failed, and no later request was sent; deleting again removes the \
                 rest: {}",
                failed.deleted,
                failed.total,
                without_prefix(&failed.error)
            ))
        })?;
        Ok(n)
    }

    async fn search(
        &self,
        collection: &str,
        vector: &[f32],
        f: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        let config = self.config(collection).await?;
        Self::check(config, vector)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut q = QueryPointsBuilder::new(self.name(collection))
            .query(vector.to_vec())
            .limit(limit as u64)
            .with_payload(true);
        if let Some(f) = f.filter(|f| !f.is_empty()) {
            q = q.filter(filter(f));
        }
        let resp = self.client.query(q).await.map_err(|e| self.err(e))?;
        Ok(resp
            .result
            .into_iter()
            .filter_map(|p| {
                Some(ScoredPoint {
                    id: num_id(p.id)?,
                    score: p.score,
                    payload: json_payload(p.payload),
                })
            })
            .collect())
    }

    async fn search_hybrid(
        &self,
        collection: &str,
        vector: &[f32],
        text: &str,
        f: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        let config = self.config(collection).await?;
        Self::check(config, vector)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let n = keywords::candidates(limit);
        let (indices, values): (Vec<u32>, Vec<f32>) = sparse_terms(text)
            .into_iter()
            .map(|(i, _)| (i, 1.0))
            .unzip();
        // Two plain queries fused here by the same weighted RRF as the embedded store's
        // (`keywords::fuse`), rather than by Qdrant's server-side fusion, whose constant and
        // weights depend on the server's version.
        let by_vector = self.search(collection, vector, f, n).await?;
        let by_keywords = if indices.is_empty() {
            Vec::new()
        } else {
            let mut sparse = QueryPointsBuilder::new(self.name(collection))
                .query(Query::new_nearest(VectorInput::new_sparse(indices, values)))
                .using(KEYWORD_VECTOR)
                .limit(n as u64)
                .with_payload(true);
            if let Some(f) = f.filter(|f| !f.is_empty()) {
                sparse = sparse.filter(filter(f));
            }
            let resp = self.client.query(sparse).await.map_err(|e| self.err(e))?;
            resp.result
                .into_iter()
                .filter_map(|p| {
                    Some(ScoredPoint {
                        id: num_id(p.id)?,
                        score: p.score,
                        payload: json_payload(p.payload),
                    })
                })
                .collect()
        };
        let ids = |points: &[ScoredPoint]| points.iter().map(|p| p.id).collect::<Vec<_>>();
        let fused = keywords::fuse(&ids(&by_vector), &ids(&by_keywords), limit);
        let mut payloads: HashMap<PointId, Payload> = by_vector
            .into_iter()
            .chain(by_keywords)
            .map(|p| (p.id, p.payload))
            .collect();
        Ok(fused
            .into_iter()
            .filter_map(|(id, score)| {
                Some(ScoredPoint {
                    id,
                    score,
                    payload: payloads.remove(&id)?,
                })
            })
            .collect())
    }

    async fn count(&self, collection: &str, f: Option<&Filter>) -> Result<u64> {
        self.config(collection).await?;
        let mut c = CountPointsBuilder::new(self.name(collection)).exact(true);
        if let Some(f) = f.filter(|f| !f.is_empty()) {
            c = c.filter(filter(f));
        }
        let resp = self.client.count(c).await.map_err(|e| self.err(e))?;
        Ok(resp.result.map_or(0, |r| r.count))
    }

    async fn scroll(
        &self,
        collection: &str,
        f: Option<&Filter>,
        offset: Option<PointId>,
        limit: usize,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        self.config(collection).await?;
        let mut s = ScrollPointsBuilder::new(self.name(collection))
            .limit(limit.clamp(1, u32::MAX as usize) as u32)
            .with_payload(true)
            .with_vectors(false);
        if let Some(f) = f.filter(|f| !f.is_empty()) {
            s = s.filter(filter(f));
        }
        if let Some(o) = offset {
            s = s.offset(o);
        }
        let resp = self.client.scroll(s).await.map_err(|e| self.err(e))?;
        let records = resp
            .result
            .into_iter()
            .filter_map(|p| {
                Some(Record {
                    id: num_id(p.id)?,
                    payload: json_payload(p.payload),
                })
            })
            .collect();
        Ok((records, num_id(resp.next_page_offset)))
    }

    async fn replace(&self, collection: &str, f: &Filter, points: Vec<Point>) -> Result<u64> {
        let config = self.config(collection).await?;
        for p in &points {
            Self::check(config, &p.vector)?;
        }
        let old = self.ids_matching(collection, f).await?;
        let removed = old.len() as u64;
        let new_ids: std::collections::HashSet<PointId> = points.iter().map(|p| p.id).collect();
        // Qdrant has no transaction: the new points go in first, so a search never finds the
        // source empty. A failure part way deletes nothing: every old point stays searchable,
        // but those whose ids a stored new point took now hold the new version.
        let order: Vec<PointId> = points.iter().map(|p| p.id).collect();
        if let Err(failed) = self.upsert_checked(collection, points).await {
            let old_ids: std::collections::HashSet<PointId> = old.iter().copied().collect();
            let overwritten = order[..failed.stored]
                .iter()
                .filter(|id| old_ids.contains(id))
                .count();
            return Err(MemoryError::Store(format!(
                "the replacement stopped: {} of {} new points were stored (in requests of \
                 {UPSERT_BATCH_POINTS}) before a request failed, and none of the {removed} old \
                 points was deleted, {overwritten} of them overwritten by new points with the \
                 same id; searches see the old version mixed with the new points stored until \
                 the replacement is run again: {}",
                failed.stored,
                failed.total,
                without_prefix(&failed.error)
            )));
        }
        let stale: Vec<PointId> = old.into_iter().filter(|id| !new_ids.contains(id)).collect();
        let stale_count = stale.len();
        if let Err(failed) = self.delete_ids(collection, stale).await {
            return Err(MemoryError::Store(format!(
                "the replacement stopped: all {} new points were stored, but deleting the {} \
                 old points they did not overwrite stopped after {} (in requests of \
                 {DELETE_BATCH_IDS}); searches see the rest of the old version beside the new \
                 one until the replacement is run again: {}",
                new_ids.len(),
                stale_count,
                failed.deleted,
                without_prefix(&failed.error)
            )));
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_api_key() {
        let mut config = QdrantConfig::new("http://127.0.0.1:6334");
        config.api_key = Some("s3cret-key".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("api_key: Some(\"[redacted]\")"), "{shown}");
        assert!(shown.contains("127.0.0.1:6334"), "{shown}");
    }
}
