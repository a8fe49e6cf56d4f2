//! Typed configuration of the memory service, and the one call that opens it.
//!
//! Libraries never read the environment; the gateway binary does (`QDRANT_URL`,
//! `QDRANT_API_KEY`, the embedding endpoint) and fills a [`MemoryConfig`]. [`MemoryService::open`]
//! then builds the store and the embedder and hands back [`SessionMemory`] and
//! [`PatternIndex`] sharing them, ready for [`crate::tools::register`] or a command line.
//!
//! [`MemoryService::open`] is strict: an embedding server that cannot be probed fails it, which
//! suits a command line (it says so at once). A server opens memory with
//! [`MemoryService::open_lazily`] instead: an HTTP embedder that is down, slow or answering a
//! 5xx at that moment (it starts after the gateway, restarts) leaves memory open, its tools
//! answering the retryable `embedder_unavailable` until a later probe reaches the server
//! ([`crate::embed`]'s lazy embedder), rather than keeping the whole gateway from starting.
//! A lasting answer (401, 404 for a wrong model, a redirect not followed, no embeddings) or a
//! configuration refused still fails, naming it: waiting would not fix it.

use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use async_trait::async_trait;

use crate::embed::{
    Embedder, HttpEmbedderConfig, LazyEmbedder, OllamaEmbedder, OpenAiEmbedder, passing,
};
use crate::error::{MemoryError, Result};
use crate::patterns::{PatternIndex, PatternIndexConfig};
use crate::session::SessionMemory;
use crate::store::embedded::EmbeddedStore;
use crate::store::{CollectionConfig, Filter, Point, PointId, Record, ScoredPoint, VectorStore};

/// Where vectors live.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreConfig {
    /// The embedded store in this SQLite file (the default).
    Embedded {
        /// The database file.
        path: PathBuf,
    },
    /// A Qdrant server (feature `qdrant`).
    #[cfg(feature = "qdrant")]
    Qdrant(crate::store::qdrant::QdrantConfig),
}

/// Which model embeds.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum EmbedderConfig {
    /// An OpenAI-compatible `/v1/embeddings` server (LM Studio, llama.cpp, vLLM, hosted).
    OpenAi(HttpEmbedderConfig),
    /// Ollama's `/api/embed`.
    Ollama(HttpEmbedderConfig),
    /// The in-process model in this folder (feature `local-embed`).
    Local {
        /// The folder with `config.json`, `tokenizer.json`, `model.safetensors`.
        path: PathBuf,
    },
}

/// Everything [`MemoryService::open`] needs.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// The store.
    pub store: StoreConfig,
    /// The embedder.
    pub embedder: EmbedderConfig,
    /// Pattern indexing settings.
    pub patterns: PatternIndexConfig,
    /// The most memories one project may hold ([`SessionMemory::with_max_per_project`];
    /// [`crate::DEFAULT_MAX_PER_PROJECT`] is the usual value).
    pub max_memories_per_project: u64,
}

/// Opens the configured store.
pub async fn open_store(config: &StoreConfig) -> Result<Arc<dyn VectorStore>> {
    match config {
        StoreConfig::Embedded { path } => {
            let path = path.clone();
            let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(path))
                .await
                .map_err(|e| MemoryError::stopped("opening the store", &e))??;
            Ok(Arc::new(store))
        }
        #[cfg(feature = "qdrant")]
        StoreConfig::Qdrant(q) => Ok(Arc::new(crate::store::qdrant::QdrantStore::connect(
            q.clone(),
        )?)),
    }
}

/// Connects the configured embedder (probing HTTP servers for their dimension).
pub async fn connect_embedder(config: &EmbedderConfig) -> Result<Arc<dyn Embedder>> {
    match config {
        EmbedderConfig::OpenAi(c) => Ok(Arc::new(OpenAiEmbedder::connect(c.clone()).await?)),
        EmbedderConfig::Ollama(c) => Ok(Arc::new(OllamaEmbedder::connect(c.clone()).await?)),
        #[cfg(feature = "local-embed")]
        EmbedderConfig::Local { path } => {
            let path = path.clone();
            let e = tokio::task::spawn_blocking(move || crate::embed::LocalEmbedder::load(path))
                .await
                .map_err(|e| MemoryError::stopped("loading the model", &e))??;
            Ok(Arc::new(e))
        }
        #[cfg(not(feature = "local-embed"))]
        EmbedderConfig::Local { path } => Err(MemoryError::ModelLoad {
            path: path.display().to_string(),
            reason: "this build has no in-process embedder (enable the `local-embed` feature)"
                .into(),
        }),
    }
}

/// The memory service: session memory and pattern examples over one store and embedder.
#[derive(Debug, Clone)]
pub struct MemoryService {
    /// Session memory.
    pub session: Arc<SessionMemory>,
    /// Pattern examples.
    pub patterns: Arc<PatternIndex>,
}

impl MemoryService {
    /// Opens the store, connects the embedder, and builds both halves.
    pub async fn open(config: &MemoryConfig) -> Result<Self> {
        let store = open_store(&config.store).await?;
        let embedder = connect_embedder(&config.embedder).await?;
        Ok(Self::with(store, embedder, config.patterns.clone())
            .limited(config.max_memories_per_project))
    }

    /// [`MemoryService::open`] for a server: when the HTTP embedder cannot be probed for a
    /// reason that passes (refused, unreachable, timed out, 408, 429, 5xx), memory opens
    /// anyway, logs one warning, and its embedder connects at a later use, at most one probe
    /// per [`EMBEDDER_RETRY`] (see [`MemoryService::open_lazily_with`]). Any other failure
    /// fails as [`MemoryService::open`] does.
    pub async fn open_lazily(config: &MemoryConfig) -> Result<Self> {
        Self::open_lazily_with(config, EMBEDDER_RETRY).await
    }

    /// [`MemoryService::open_lazily`] probing a server that was away at most once per
    /// `retry_after`: meanwhile every use answers `embedder_unavailable` (retryable) at once,
    /// and uses that come while a probe is under way share its outcome.
    pub async fn open_lazily_with(config: &MemoryConfig, retry_after: Duration) -> Result<Self> {
        let store = open_store(&config.store).await?;
        let e = match connect_embedder(&config.embedder).await {
            Ok(embedder) => {
                return Ok(Self::with(store, embedder, config.patterns.clone())
                    .limited(config.max_memories_per_project));
            }
            Err(e) => e,
        };
        let (EmbedderConfig::OpenAi(c) | EmbedderConfig::Ollama(c)) = &config.embedder else {
            return Err(e);
        };
        if !passing(&e) {
            return Err(e);
        }
        let endpoint = kberg_core::redact_url(&c.base_url);
        tracing::warn!(
            endpoint = %endpoint,
            model = %c.model,
            error = %e,
            "memory's embedder is not reachable yet; memory tools answer embedder_unavailable \
             until it is"
        );
        let wire = config.embedder.clone();
        let lazy = Arc::new(LazyEmbedder::new(
            Box::new(move || {
                let wire = wire.clone();
                Box::pin(async move { connect_embedder(&wire).await })
            }),
            endpoint,
            c.model.clone(),
            c.max_input_tokens,
            retry_after,
            &e,
        ));
        let embedder: Arc<dyn Embedder> = lazy.clone();
        // Indexing creates its collection before it embeds anything: it takes the dimension
        // from the embedder then, connecting it first.
        let indexed: Arc<dyn VectorStore> = Arc::new(DimensionAtConnect {
            inner: store.clone(),
            embedder: lazy,
        });
        let service = Self {
            session: Arc::new(SessionMemory::new(store, embedder.clone())),
            patterns: Arc::new(PatternIndex::with_config(
                indexed,
                embedder,
                config.patterns.clone(),
            )),
        };
        Ok(service.limited(config.max_memories_per_project))
    }

    /// This service with its session half holding at most `max` memories per project.
    fn limited(mut self, max: u64) -> Self {
        self.session = Arc::new(self.session.as_ref().clone().with_max_per_project(max));
        self
    }

    /// Builds both halves over an existing store and embedder.
    pub fn with(
        store: Arc<dyn VectorStore>,
        embedder: Arc<dyn Embedder>,
        patterns: PatternIndexConfig,
    ) -> Self {
        Self {
            session: Arc::new(SessionMemory::new(store.clone(), embedder.clone())),
            patterns: Arc::new(PatternIndex::with_config(store, embedder, patterns)),
        }
    }

    /// The four MCP tools over this service (see [`crate::tools`]).
    pub fn tools(&self) -> crate::tools::MemoryTools {
        crate::tools::MemoryTools {
            session: self.session.clone(),
            patterns: self.patterns.clone(),
            on_indexed: None,
            access: None,
        }
    }
}

/// How often [`MemoryService::open_lazily`] probes an embedder that was away, at most.
pub const EMBEDDER_RETRY: Duration = Duration::from_secs(2);

/// The store of a pattern index whose embedder connects late: a collection asked for before
/// the embedder connected (dimension 0, which no embedder makes) takes the dimension the
/// embedder has once connected, or fails with why it is not. Everything else goes straight
/// through.
struct DimensionAtConnect {
    inner: Arc<dyn VectorStore>,
    embedder: Arc<LazyEmbedder>,
}

#[async_trait]
impl VectorStore for DimensionAtConnect {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn ensure_collection(&self, name: &str, mut config: CollectionConfig) -> Result<()> {
        if config.dimension == 0 {
            config.dimension = self.embedder.ready().await?.dimension();
        }
        self.inner.ensure_collection(name, config).await
    }

    async fn collection(&self, name: &str) -> Result<Option<CollectionConfig>> {
        self.inner.collection(name).await
    }

    async fn drop_collection(&self, name: &str) -> Result<bool> {
        self.inner.drop_collection(name).await
    }

    async fn upsert(&self, collection: &str, points: Vec<Point>) -> Result<()> {
        self.inner.upsert(collection, points).await
    }

    async fn delete(&self, collection: &str, filter: &Filter) -> Result<u64> {
        self.inner.delete(collection, filter).await
    }

    async fn search(
        &self,
        collection: &str,
        vector: &[f32],
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.inner.search(collection, vector, filter, limit).await
    }

    async fn search_hybrid(
        &self,
        collection: &str,
        vector: &[f32],
        text: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.inner
            .search_hybrid(collection, vector, text, filter, limit)
            .await
    }

    async fn count(&self, collection: &str, filter: Option<&Filter>) -> Result<u64> {
        self.inner.count(collection, filter).await
    }

    async fn scroll(
        &self,
        collection: &str,
        filter: Option<&Filter>,
        offset: Option<PointId>,
        limit: usize,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        self.inner.scroll(collection, filter, offset, limit).await
    }

    async fn replace(&self, collection: &str, filter: &Filter, points: Vec<Point>) -> Result<u64> {
        self.inner.replace(collection, filter, points).await
    }
}
