//! Typed configuration of the memory service, and the one call that opens it.
//!
//! Libraries never read the environment; the gateway binary does (`QDRANT_URL`,
//! `QDRANT_API_KEY`, the embedding endpoint) and fills a [`MemoryConfig`]. [`MemoryService::open`]
//! then builds the store and the embedder and hands back [`SessionMemory`] and
//! [`PatternIndex`] sharing them, ready for [`crate::tools::register`] or a command line.

use std::path::PathBuf;
use std::sync::Arc;

use crate::embed::{Embedder, HttpEmbedderConfig, OllamaEmbedder, OpenAiEmbedder};
use crate::error::{MemoryError, Result};
use crate::patterns::{PatternIndex, PatternIndexConfig};
use crate::session::SessionMemory;
use crate::store::VectorStore;
use crate::store::embedded::EmbeddedStore;

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
        let mut service = Self::with(store, embedder, config.patterns.clone());
        service.session = Arc::new(
            service
                .session
                .as_ref()
                .clone()
                .with_max_per_project(config.max_memories_per_project),
        );
        Ok(service)
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
