//! # bridle-memory
//!
//! Bridle's memory service as a library: what agents remember across sessions, and semantic
//! search over example repositories that illustrate a project's architecture patterns.
//!
//! - [`Embedder`] turns text into vectors: an OpenAI-compatible server, Ollama, or (feature
//!   `local-embed`) an in-process BERT model.
//! - [`VectorStore`] keeps vectors with payloads and filters: [`EmbeddedStore`] (SQLite on disk,
//!   exact in-memory search, the default) or, with feature `qdrant`, a Qdrant server.
//! - [`SessionMemory`] is `remember` / `recall` / list / forget.
//! - [`PatternIndex`] indexes a repository (clone, code-aware chunking, batched embedding) under
//!   a reference tag, refreshes it atomically, and searches it.
//! - [`MemoryService::open`] builds all of it from a typed [`MemoryConfig`].
//! - [`tools::register`] exposes all of it as Kberg tools (`recall`, `remember`,
//!   `search_pattern_examples`, `refresh_pattern_example`).

pub mod chunk;
mod config;
pub mod embed;
mod error;
pub mod patterns;
mod progress;
pub mod repo;
mod scrub;
pub mod session;
pub mod store;
mod time;
pub mod tools;

pub use config::{
    EMBEDDER_RETRY, EmbedderConfig, MemoryConfig, MemoryService, StoreConfig, connect_embedder,
    open_store,
};
#[cfg(feature = "local-embed")]
pub use embed::LocalEmbedder;
pub use embed::{
    ConstantEmbedder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_INPUT_TOKENS, Embedder,
    HttpEmbedderConfig, OllamaEmbedder, OpenAiEmbedder, fit_input,
};
pub use error::{MemoryError, Result};
pub use patterns::{
    ChunkFilter, ChunkPage, ExampleRepo, IndexReport, IndexedChunk, IndexedExample, LimitNames,
    LineProgress, NoProgress, PatternHit, PatternIndex, PatternIndexConfig, Progress,
    ProgressEvent, SearchMode,
};
pub use session::{
    DEFAULT_MAX_PER_PROJECT, Memory, MemoryFilter, NewMemory, RecallHit, ReembedReport,
    SessionMemory,
};
pub use store::embedded::EmbeddedStore;
#[cfg(feature = "qdrant")]
pub use store::qdrant::{QdrantConfig, QdrantStore};
pub use store::{
    CollectionConfig, Condition, Distance, Filter, MatchValue, Payload, Point, PointId, Record,
    ScoredPoint, VectorStore,
};
