//! An HTTP embedder that was not reachable when memory opened, connected at its first use.
//!
//! A gateway opens memory before it serves anything, and memory is optional: an embedding
//! server that starts after the gateway (a Compose stack), restarts, or is away for a moment
//! must not keep the rules, the routing and the admin API from starting. So when the probe for
//! the model's dimension fails in a way that passes by itself ([`super::http::passing`]),
//! [`crate::MemoryService::open_lazily`] opens memory over a [`LazyEmbedder`]: each use probes
//! again, at most once per `retry_after` (concurrent uses share one attempt, so a burst of
//! calls makes one request, not one each), and answers [`MemoryError::EmbedderUnavailable`]
//! (retryable) meanwhile. Once a probe succeeds it is the connected embedder, dimension fixed
//! then, and is never probed again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;

use super::Embedder;
use crate::error::{MemoryError, Result};

/// Connects the real embedder (probing its server).
pub(crate) type Connect =
    Box<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Embedder>>> + Send + Sync>;

/// An embedder connected at its first use that finds the server (see the module doc).
pub(crate) struct LazyEmbedder {
    connect: Connect,
    connected: OnceLock<Arc<dyn Embedder>>,
    /// The last failed attempt; held across an attempt, so callers queue behind it.
    attempts: tokio::sync::Mutex<Option<Failed>>,
    /// Bumped (under `attempts`) by each attempt, so a caller that waited for one takes its
    /// outcome instead of making another.
    generation: AtomicU64,
    /// The endpoint as errors name it (redacted).
    endpoint: String,
    model: String,
    max_input_tokens: usize,
    retry_after: Duration,
}

/// When the last attempt failed, and why.
struct Failed {
    at: Instant,
    reason: String,
}

impl std::fmt::Debug for LazyEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyEmbedder")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("connected", &self.connected.get().is_some())
            .finish_non_exhaustive()
    }
}

impl LazyEmbedder {
    /// An embedder whose probe at `first` failed with `first_error`; `connect` probes again.
    /// `model` and `max_input_tokens` are the configured ones (what the connected embedder
    /// reports too).
    pub(crate) fn new(
        connect: Connect,
        endpoint: String,
        model: String,
        max_input_tokens: usize,
        retry_after: Duration,
        first_error: &MemoryError,
    ) -> Self {
        Self {
            connect,
            connected: OnceLock::new(),
            attempts: tokio::sync::Mutex::new(Some(Failed {
                at: Instant::now(),
                reason: reason_of(first_error),
            })),
            generation: AtomicU64::new(0),
            endpoint,
            model,
            max_input_tokens: max_input_tokens.max(1),
            retry_after,
        }
    }

    /// The connected embedder, probing for it when the last attempt is older than
    /// `retry_after`; meanwhile `embedder_unavailable` with the last attempt's reason.
    pub(crate) async fn ready(&self) -> Result<Arc<dyn Embedder>> {
        if let Some(e) = self.connected.get() {
            return Ok(Arc::clone(e));
        }
        let seen = self.generation.load(Ordering::Acquire);
        let mut last = self.attempts.lock().await;
        if let Some(e) = self.connected.get() {
            return Ok(Arc::clone(e));
        }
        let shared = self.generation.load(Ordering::Acquire) != seen;
        let recent = last
            .as_ref()
            .is_some_and(|f| f.at.elapsed() < self.retry_after);
        if shared || recent {
            return Err(self.pending(last.as_ref()));
        }
        let outcome = (self.connect)().await;
        self.generation.fetch_add(1, Ordering::AcqRel);
        match outcome {
            Ok(e) => {
                let e = Arc::clone(self.connected.get_or_init(|| e));
                *last = None;
                tracing::info!(
                    endpoint = %self.endpoint,
                    model = %self.model,
                    dimension = e.dimension(),
                    "memory's embedder is connected"
                );
                Ok(e)
            }
            Err(err) => {
                *last = Some(Failed {
                    at: Instant::now(),
                    reason: reason_of(&err),
                });
                Err(err)
            }
        }
    }

    /// The refusal while not connected.
    fn pending(&self, last: Option<&Failed>) -> MemoryError {
        MemoryError::EmbedderUnavailable {
            endpoint: self.endpoint.clone(),
            reason: format!(
                "not reachable yet (tried again at most every {} ms); last attempt: {}",
                self.retry_after.as_millis(),
                last.map_or("none", |f| f.reason.as_str())
            ),
        }
    }
}

/// What an attempt's error says, without the endpoint an `embedder_unavailable` names again.
fn reason_of(e: &MemoryError) -> String {
    match e {
        MemoryError::EmbedderUnavailable { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

#[async_trait]
impl Embedder for LazyEmbedder {
    /// The connected embedder's; 0 until connected (no vector has been made then).
    fn dimension(&self) -> usize {
        self.connected.get().map_or(0, |e| e.dimension())
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.ready().await?.embed(texts).await
    }

    fn max_input_tokens(&self) -> usize {
        self.connected
            .get()
            .map_or(self.max_input_tokens, |e| e.max_input_tokens())
    }

    fn count_tokens(&self, text: &str) -> usize {
        match self.connected.get() {
            Some(e) => e.count_tokens(text),
            None => text.len().div_ceil(3),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::embed::ConstantEmbedder;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_uses_share_one_probe() {
        let probes = Arc::new(AtomicUsize::new(0));
        let entered = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        let (p, e, r) = (probes.clone(), entered.clone(), release.clone());
        let lazy = Arc::new(LazyEmbedder::new(
            Box::new(move || {
                let (p, e, r) = (p.clone(), e.clone(), r.clone());
                Box::pin(async move {
                    p.fetch_add(1, Ordering::SeqCst);
                    e.notify_one();
                    r.notified().await;
                    Ok(Arc::new(ConstantEmbedder::new(4)) as Arc<dyn Embedder>)
                })
            }),
            "http://embed.example".into(),
            "constant".into(),
            512,
            Duration::ZERO,
            &MemoryError::EmbedderUnavailable {
                endpoint: "http://embed.example".into(),
                reason: "connection refused or unreachable".into(),
            },
        ));
        assert_eq!(lazy.dimension(), 0);
        let uses: Vec<_> = (0..8)
            .map(|_| {
                let lazy = lazy.clone();
                tokio::spawn(async move { lazy.embed(&["x".to_string()]).await })
            })
            .collect();
        entered.notified().await;
        release.notify_one();
        for u in uses {
            let v = u.await.expect("joined").expect("embedded once connected");
            assert_eq!(v[0].len(), 4);
        }
        assert_eq!(probes.load(Ordering::SeqCst), 1, "one probe for all");
        assert_eq!(lazy.dimension(), 4);
    }
}
