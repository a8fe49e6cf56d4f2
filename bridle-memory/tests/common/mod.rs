//! Helpers shared by the integration tests: small embedders with known behaviour and the store
//! battery every backend runs.
#![allow(dead_code)]

pub mod battery;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bridle_memory::{Embedder, MemoryError, Result};

/// A bag-of-words embedder by feature hashing: texts sharing words get close vectors. A real
/// (if weak) embedding method with no model, so ranking tests do not depend on model files.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    pub dimension: usize,
}

impl HashingEmbedder {
    pub fn new(dimension: usize) -> Self {
        Self { dimension }
    }

    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimension];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_lowercase)
        {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in word.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            v[(h % self.dimension as u64) as usize] += 1.0;
        }
        if v.iter().all(|x| *x == 0.0) {
            v[0] = 1.0;
        }
        v
    }
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn dimension(&self) -> usize {
        self.dimension
    }
    fn model(&self) -> &str {
        "hashing"
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

/// Wraps an embedder: can be switched to fail like a server that is down, to answer with the
/// wrong dimension, or to be slow.
pub struct FaultyEmbedder {
    pub inner: Arc<dyn Embedder>,
    pub down: AtomicBool,
    pub wrong_dimension: AtomicBool,
    pub delay: Duration,
}

impl FaultyEmbedder {
    pub fn new(inner: Arc<dyn Embedder>) -> Self {
        Self {
            inner,
            down: AtomicBool::new(false),
            wrong_dimension: AtomicBool::new(false),
            delay: Duration::ZERO,
        }
    }
}

#[async_trait]
impl Embedder for FaultyEmbedder {
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
    fn model(&self) -> &str {
        self.inner.model()
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(MemoryError::EmbedderUnavailable {
                endpoint: "test".into(),
                reason: "connection refused or unreachable".into(),
            });
        }
        let mut v = self.inner.embed(texts).await?;
        if self.wrong_dimension.load(Ordering::SeqCst) {
            for x in &mut v {
                x.push(0.5);
            }
        }
        Ok(v)
    }
}

/// Writes `files` (path, contents) under `root`.
pub fn write_tree(root: &std::path::Path, files: &[(&str, &str)]) {
    for (p, c) in files {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().expect("a file path has a parent")).expect("mkdir");
        std::fs::write(path, c).expect("write test file");
    }
}
