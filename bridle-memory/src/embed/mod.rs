//! Embedders: text in, vectors out.
//!
//! [`Embedder`] is the one seam between memory and a model. Two HTTP implementations cover the
//! servers people run: [`OpenAiEmbedder`] speaks the OpenAI-compatible `POST /v1/embeddings`
//! (LM Studio, llama.cpp's server, vLLM, hosted APIs) and [`OllamaEmbedder`] speaks Ollama's
//! `POST /api/embed`. With the `local-embed` feature, [`LocalEmbedder`] runs a sentence-embedding
//! BERT (all-MiniLM-L6-v2 class) in-process on the CPU, so memory works with no server at all.
//!
//! Every implementation checks what comes back: one vector per input, each of the declared
//! dimension. A server that answers with another dimension is an error
//! ([`crate::MemoryError::DimensionMismatch`]), never a silently corrupted index.

// `LocalEmbedder` above exists only with the `local-embed` feature; the all-features build
// checks the link.
#![cfg_attr(not(feature = "local-embed"), allow(rustdoc::broken_intra_doc_links))]

mod answer;
mod http;
mod lazy;
#[cfg(feature = "local-embed")]
mod local;

use async_trait::async_trait;

use crate::error::{MemoryError, Result};

pub(crate) use http::passing;
pub use http::{DEFAULT_CONNECT_TIMEOUT, HttpEmbedderConfig, OllamaEmbedder, OpenAiEmbedder};
pub(crate) use lazy::LazyEmbedder;
#[cfg(feature = "local-embed")]
pub use local::LocalEmbedder;

/// Turns texts into vectors of a fixed dimension.
#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// The length of every vector this embedder returns.
    fn dimension(&self) -> usize;

    /// A name for the model, recorded with indexed data (e.g. `all-minilm-l6-v2`).
    fn model(&self) -> &str;

    /// One vector per text, in order. An empty input gives an empty output.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;

    /// The most tokens of text one input may hold, not counting the model's own special tokens
    /// (`[CLS]`, `[SEP]`): what is longer is cut by the model, or refused by a server. Chunking
    /// sizes chunks to fit, and [`fit_input`] cuts other texts (memories, queries) to it.
    fn max_input_tokens(&self) -> usize {
        DEFAULT_MAX_INPUT_TOKENS
    }

    /// How many tokens `text` takes in this model's input, special tokens not counted. The
    /// default is an estimate that errs high (one token per three bytes, where BPE and WordPiece
    /// vocabularies average three to four characters per token on code); an embedder with its
    /// tokenizer at hand counts exactly.
    fn count_tokens(&self, text: &str) -> usize {
        text.len().div_ceil(3)
    }
}

/// The input window assumed for an embedder that does not say (512 tokens: BERT-class models
/// and most embedding servers take at least that).
pub const DEFAULT_MAX_INPUT_TOKENS: usize = 512;

/// `text` cut (at a character boundary) to the longest prefix that fits the embedder's input
/// window, so what is sent is exactly what is embedded.
pub fn fit_input(embedder: &dyn Embedder, text: &str) -> String {
    let max = embedder.max_input_tokens();
    if embedder.count_tokens(text) <= max {
        return text.to_string();
    }
    let ends: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let (mut lo, mut hi) = (0usize, ends.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if embedder.count_tokens(&text[..ends[mid]]) <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    text[..ends[lo]].to_string()
}

/// Checks that `vectors` has one vector of `dimension` per input.
pub(crate) fn check_vectors(dimension: usize, inputs: usize, vectors: &[Vec<f32>]) -> Result<()> {
    if vectors.len() != inputs {
        return Err(MemoryError::EmbedderProtocol(format!(
            "asked for {inputs} embeddings, got {}",
            vectors.len()
        )));
    }
    if let Some(v) = vectors.iter().find(|v| v.len() != dimension) {
        return Err(MemoryError::DimensionMismatch {
            expected: dimension,
            actual: v.len(),
        });
    }
    if vectors.iter().any(|v| v.iter().any(|x| !x.is_finite())) {
        return Err(MemoryError::EmbedderProtocol(
            "an embedding has a NaN or infinite component".into(),
        ));
    }
    Ok(())
}

/// An embedder that returns the same unit vector for every text: it costs nothing, so a
/// pipeline measured with it measures only its own work (chunking, batching, storing). Useful
/// for benchmarks and for tests that do not look at ranking.
#[derive(Debug, Clone)]
pub struct ConstantEmbedder {
    dimension: usize,
    model: String,
}

impl ConstantEmbedder {
    /// A constant embedder of this dimension (at least 1), whose model is named `constant`.
    pub fn new(dimension: usize) -> Self {
        Self {
            dimension: dimension.max(1),
            model: "constant".to_owned(),
        }
    }

    /// The same embedder under another model name: what a store sees after the configured
    /// model changed (for tests of the model check).
    ///
    /// ```
    /// use bridle_memory::{ConstantEmbedder, Embedder};
    ///
    /// assert_eq!(ConstantEmbedder::new(8).named("other").model(), "other");
    /// ```
    pub fn named(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }
}

#[async_trait]
impl Embedder for ConstantEmbedder {
    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut v = vec![0.0; self.dimension];
        v[0] = 1.0;
        Ok(vec![v; texts.len()])
    }
}
