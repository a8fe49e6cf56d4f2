//! A provider that plays back a script, for tests and benchmarks of code built on the loop.
//!
//! [`ScriptedProvider`] answers each turn with the next prepared [`ChatResponse`] and records
//! every request it was sent, so a test can check what the loop handed the model (the repair
//! diagnostic, the final refusal) without a network or a model. When the script runs out it
//! answers [`ProviderError::Malformed`], so a loop that takes more turns than expected fails
//! loudly rather than hanging.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::message::{ChatRequest, ChatResponse, FinishReason, ToolCall};
use crate::provider::{InferenceProvider, ProviderError};

/// Plays back prepared responses in order and records the requests.
#[derive(Debug, Clone, Default)]
pub struct ScriptedProvider {
    script: Arc<Mutex<VecDeque<ChatResponse>>>,
    seen: Arc<Mutex<Vec<ChatRequest>>>,
    record: bool,
}

impl ScriptedProvider {
    /// A provider that answers with `responses`, in order, and records the requests.
    pub fn new(responses: impl IntoIterator<Item = ChatResponse>) -> Self {
        Self {
            script: Arc::new(Mutex::new(responses.into_iter().collect())),
            seen: Arc::default(),
            record: true,
        }
    }

    /// Stops recording requests (for benchmarks, where the copies would dominate).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Appends a response to the script.
    pub fn push(&self, response: ChatResponse) {
        lock(&self.script).push_back(response);
    }

    /// The requests sent so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.seen).clone()
    }

    /// A text-only response.
    pub fn text(text: impl Into<String>) -> ChatResponse {
        ChatResponse {
            text: text.into(),
            ..ChatResponse::default()
        }
    }

    /// A response calling one tool.
    pub fn call(id: &str, name: &str, arguments: serde_json::Value) -> ChatResponse {
        ChatResponse {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: name.into(),
                arguments,
            }],
            finish: FinishReason::ToolCalls,
            ..ChatResponse::default()
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Test-support state: a poisoned lock only means another test thread panicked.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl InferenceProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "script"
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        if cancel.is_cancelled() {
            return Err(ProviderError::Cancelled);
        }
        if self.record {
            lock(&self.seen).push(request.clone());
        }
        lock(&self.script)
            .pop_front()
            .ok_or_else(|| ProviderError::malformed("the script has no more responses"))
    }
}
