//! What the model is sent each turn, as distinct from what the run stores. The stored
//! conversation ([`crate::RunOutcome::messages`]) keeps everything the model wrote and was told;
//! the request sent may show a turn recovered from text as its calls alone and leave out earlier
//! failed calls, because small models copy what they see. Sending (streamed or not, cancellable)
//! and the per-turn tool choice live here too.

use crate::message::{ChatOptions, ChatRequest, ChatResponse, Message, ToolChoice};
use crate::outcome::AgentEvent;
use crate::provider::{ProviderError, collect_stream};

use super::Run;

impl Run<'_> {
    pub(super) async fn model_turn(
        &mut self,
        choice: Option<ToolChoice>,
    ) -> Result<ChatResponse, ProviderError> {
        if self.config().id_handles {
            let new = self.handles.scan(&self.request.messages);
            self.interventions.handles_issued += u32::try_from(new).unwrap_or(u32::MAX);
        }
        if self.config().forget_old_failures && has_old_failures(&self.request.messages) {
            self.interventions.failures_forgotten += 1;
        }
        let overridden = choice.is_some();
        if let Some(choice) = choice {
            self.request.options.tool_choice = choice;
        }
        let r = self.send_turn().await;
        if overridden {
            let ChatOptions { tool_choice, .. } = &self.agent.config.options;
            self.request.options.tool_choice.clone_from(tool_choice);
        }
        r
    }

    /// The request as the model is sent it: recovered turns as their calls alone when
    /// [`crate::AgentConfig::compact_recovered_turns`] is on, failed calls of earlier turns left out
    /// when [`crate::AgentConfig::forget_old_failures`] is on, long ids as handles when
    /// [`crate::AgentConfig::id_handles`] is on (the stored conversation is unchanged).
    fn request_to_send(&self) -> std::borrow::Cow<'_, ChatRequest> {
        let compact = self.config().compact_recovered_turns && !self.recovered_turns.is_empty();
        let handles = self.config().id_handles && !self.handles.is_empty();
        if !compact && !self.config().forget_old_failures && !handles {
            return std::borrow::Cow::Borrowed(&self.request);
        }
        let mut request = self.request.clone();
        for &i in self.recovered_turns.iter().filter(|_| compact) {
            if let Some(Message::Assistant { content, .. }) = request.messages.get_mut(i) {
                content.clear();
            }
        }
        if self.config().forget_old_failures {
            forget_old_failures(&mut request.messages);
        }
        if handles {
            self.handles.shorten_messages(&mut request.messages);
        }
        std::borrow::Cow::Owned(request)
    }

    async fn send_turn(&self) -> Result<ChatResponse, ProviderError> {
        let provider = &self.agent.provider;
        let request = self.request_to_send();
        let request = request.as_ref();
        let fut = async {
            if self.agent.config.stream {
                let stream = provider.chat_stream(request, self.cancel).await?;
                collect_stream(stream, |t| {
                    self.emit(|| AgentEvent::TextDelta {
                        text: t.to_string(),
                    });
                })
                .await
            } else {
                let r = provider.chat(request, self.cancel).await?;
                if !r.text.is_empty() {
                    self.emit(|| AgentEvent::TextDelta {
                        text: r.text.clone(),
                    });
                }
                Ok(r)
            }
        };
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(ProviderError::Cancelled),
            r = fut => r,
        }
    }
}

/// Leaves out of `messages` (what the model is sent) the failed calls of every assistant turn
/// but the last, with their results, and turns left with neither text nor calls
/// ([`crate::AgentConfig::forget_old_failures`]). Small models copy the calls they see; a call
/// that failed and was answered a turn ago is copied again.
fn forget_old_failures(messages: &mut Vec<Message>) {
    let Some(last) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return;
    };
    let failed: std::collections::HashSet<String> = messages[..last]
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                call_id,
                is_error: true,
                ..
            } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    if failed.is_empty() {
        return;
    }
    let mut i = 0;
    messages.retain_mut(|m| {
        let keep = if i >= last {
            true
        } else {
            match m {
                Message::Tool { call_id, .. } => !failed.contains(call_id),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let had_calls = !tool_calls.is_empty();
                    tool_calls.retain(|c| !failed.contains(&c.id));
                    !(had_calls && tool_calls.is_empty() && content.trim().is_empty())
                }
                _ => true,
            }
        };
        i += 1;
        keep
    });
}

/// Whether [`forget_old_failures`] would leave something out of `messages`.
fn has_old_failures(messages: &[Message]) -> bool {
    messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
        .is_some_and(|last| {
            messages[..last]
                .iter()
                .any(|m| matches!(m, Message::Tool { is_error: true, .. }))
        })
}
