//! Asking the client several named questions at once, the same way on both protocol
//! generations.
//!
//! `ToolContext::elicit` / `sample` / `roots` ask one unnamed question at a time. The
//! 2026-07-28 revision lets a tool ask several at once and name each (the keys of an
//! `input_required` result's `inputRequests`), and some clients key their answers by those
//! names. [`ask`] does that: on a 2026-07-28 request every unanswered question goes into one
//! `input_required` result and the tool is re-run with the answers; on a 2025-11-25 session (and
//! stdio) the questions are sent as concurrent server-to-client requests and the tool waits.
//! The tool's code is the same for both.

use std::collections::BTreeMap;

use kberg_core::{PeerError, ToolContext};
use serde_json::{Value, json};

use crate::peer::INPUT_KEY_META;

/// One question for the client: a key the answer comes back under, an MCP method
/// (`elicitation/create`, `sampling/createMessage`, `roots/list`) and its params.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The answer's key (unique within one call).
    pub key: String,
    /// The MCP method.
    pub method: String,
    /// Its params.
    pub params: Value,
}

impl Question {
    /// Any method with its params.
    pub fn new(key: impl Into<String>, method: impl Into<String>, params: Value) -> Self {
        Self {
            key: key.into(),
            method: method.into(),
            params,
        }
    }

    /// A form elicitation: `message` and the JSON Schema of the requested fields.
    pub fn elicit(key: impl Into<String>, message: &str, requested_schema: Value) -> Self {
        Self::new(
            key,
            "elicitation/create",
            json!({"mode": "form", "message": message, "requestedSchema": requested_schema}),
        )
    }

    /// A sampling request (`CreateMessageRequest` params).
    pub fn sample(key: impl Into<String>, params: Value) -> Self {
        Self::new(key, "sampling/createMessage", params)
    }

    /// The client's roots.
    pub fn roots(key: impl Into<String>) -> Self {
        Self::new(key, "roots/list", json!({}))
    }
}

/// Asks every question at once and returns the answers by key. On a 2026-07-28 request with
/// unanswered questions this returns `PeerError::InputRequired` carrying all of them: return it
/// from the tool (`?`) and the call is answered `input_required`.
pub async fn ask(
    ctx: &ToolContext,
    questions: Vec<Question>,
) -> Result<BTreeMap<String, Value>, PeerError> {
    let Some(peer) = ctx.peer() else {
        return Err(PeerError::NotSupported("requests to the client".into()));
    };
    let asks = questions.into_iter().map(|q| {
        let peer = peer.clone();
        let cancel = ctx.cancellation().clone();
        async move {
            let mut params = q.params;
            if !params.is_object() {
                params = json!({});
            }
            let meta = params
                .as_object_mut()
                .map(|o| o.entry("_meta").or_insert_with(|| json!({})));
            if let Some(Value::Object(m)) = meta {
                m.insert(INPUT_KEY_META.into(), Value::String(q.key.clone()));
            }
            (q.key, peer.request(&q.method, params, cancel).await)
        }
    });
    let results = futures::future::join_all(asks).await;
    let mut answers = BTreeMap::new();
    let mut needed = serde_json::Map::new();
    let mut failure = None;
    for (key, r) in results {
        match r {
            Ok(v) => {
                answers.insert(key, v);
            }
            Err(PeerError::InputRequired { requests }) => {
                if let Value::Object(m) = requests {
                    needed.extend(m);
                }
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if !needed.is_empty() {
        return Err(PeerError::InputRequired {
            requests: Value::Object(needed),
        });
    }
    Ok(answers)
}
