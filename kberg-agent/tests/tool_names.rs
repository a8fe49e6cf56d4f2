//! Tool names a hosted provider refuses: an MCP server may list names with spaces, dots,
//! slashes, non-ASCII or control characters, or longer than 64 characters. The model is shown
//! every tool under a provider-safe name (`^[a-zA-Z0-9_-]{1,64}$`), names already safe
//! unchanged, and its calls (structured or written as text) reach the tool under its real name.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kberg_agent::{
    Agent, AgentConfig, CallOutcome, ChatRequest, Message, ScriptedProvider, SurfaceError,
    ToolChoice, ToolDefinition, ToolResult, ToolSurface,
};
use kberg_core::ErrorCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The names a server lists, in order: safe ones and every kind of unsafe one.
fn names() -> Vec<String> {
    vec![
        "search_notes".into(),
        "fs.read_file".into(),
        "fs_read_file".into(),
        "notes/add".into(),
        "añadir nota".into(),
        "bell\u{7}\nnext".into(),
        format!("very_{}_long", "long".repeat(20)),
    ]
}

/// A surface listing [`names`], each taking `{"path": string}`, that records the calls it gets.
#[derive(Clone, Default)]
struct OddNames {
    calls: Arc<Mutex<Vec<(String, Value)>>>,
}

#[async_trait]
impl ToolSurface for OddNames {
    async fn tools(&self) -> Result<Vec<ToolDefinition>, SurfaceError> {
        Ok(names()
            .into_iter()
            .map(|n| {
                ToolDefinition::new(
                    n,
                    "Reads something",
                    json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                )
                .read_only(true)
            })
            .collect())
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        _cancel: CancellationToken,
    ) -> Result<ToolResult, SurfaceError> {
        self.calls
            .lock()
            .unwrap()
            .push((name.to_string(), arguments));
        Ok(ToolResult::ok(format!("ran {name}")))
    }
}

fn config() -> AgentConfig {
    AgentConfig::default()
        .ground_write_arguments(false)
        .look_before_answering(false)
}

fn provider_safe(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The names the model was shown in `request`, in listing order.
fn listed(request: &ChatRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

/// Runs a one-turn answer to learn the names the model is shown.
async fn shown_names() -> Vec<String> {
    let script = ScriptedProvider::new([ScriptedProvider::text("Nothing to do.")]);
    let out = Agent::new(script.clone(), OddNames::default())
        .with_config(config())
        .run(vec![Message::user("hi")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    listed(&script.requests()[0])
}

#[tokio::test]
async fn every_tool_is_offered_under_a_provider_safe_unique_name() {
    let shown = shown_names().await;
    let real = names();
    assert_eq!(shown.len(), real.len());
    for name in &shown {
        assert!(provider_safe(name), "{name:?} is not provider-safe");
    }
    let unique: HashSet<&String> = shown.iter().collect();
    assert_eq!(unique.len(), shown.len(), "{shown:?}");
    // Safe names are shown as they are.
    assert_eq!(shown[0], "search_notes");
    assert_eq!(shown[2], "fs_read_file");
    // The same listing gives the same names.
    assert_eq!(shown_names().await, shown);
}

#[tokio::test]
async fn a_call_under_the_shown_name_reaches_the_real_tool() {
    let shown = shown_names().await;
    let real = names();
    let surface = OddNames::default();
    let mut turns = Vec::new();
    for (i, name) in shown.iter().enumerate() {
        turns.push(ScriptedProvider::call(
            &format!("c{i}"),
            name,
            json!({"path": format!("p{i}")}),
        ));
    }
    turns.push(ScriptedProvider::text("Read them all."));
    let script = ScriptedProvider::new(turns);
    let out = Agent::new(script.clone(), surface.clone())
        .with_config(config())
        .run(vec![Message::user("read all")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let called: Vec<String> = surface
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(called, real);
    let recorded: Vec<&str> = out.calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        recorded,
        real.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(out.calls.iter().all(|c| c.outcome == CallOutcome::Ok));
    // The stored conversation holds real names; what the model is sent, the shown ones.
    let stored: Vec<&str> = out
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(stored, real.iter().map(String::as_str).collect::<Vec<_>>());
    let requests = script.requests();
    for m in requests.iter().flat_map(|r| &r.messages) {
        match m {
            Message::Tool { name, .. } => assert!(shown.contains(name), "{name:?}"),
            Message::Assistant { tool_calls, .. } => {
                for c in tool_calls {
                    assert!(shown.contains(&c.name), "{:?}", c.name);
                }
            }
            _ => {}
        }
    }
    assert_eq!(listed(&requests[1]), shown);
}

#[tokio::test]
async fn a_call_written_as_text_under_the_shown_name_reaches_the_real_tool() {
    let shown = shown_names().await;
    let surface = OddNames::default();
    let script = ScriptedProvider::new([
        ScriptedProvider::text(format!(
            r#"{{"name": "{}", "arguments": {{"path": "a"}}}}"#,
            shown[1]
        )),
        ScriptedProvider::text(format!("functions.{}: {{\"path\": \"b\"}}", shown[3])),
        ScriptedProvider::text("Done."),
    ]);
    let out = Agent::new(script.clone(), surface.clone())
        .with_config(config())
        .run(
            vec![Message::user("read a and b")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let called = surface.calls.lock().unwrap().clone();
    assert_eq!(
        called,
        [
            ("fs.read_file".to_string(), json!({"path": "a"})),
            ("notes/add".to_string(), json!({"path": "b"})),
        ]
    );
    assert!(out.calls.iter().all(|c| c.recovered_from_text));
}

#[tokio::test]
async fn a_forced_tool_and_the_names_in_notes_are_the_shown_ones() {
    let shown = shown_names().await;
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "no_such_tool", json!({})),
        ScriptedProvider::text("Sorry."),
    ]);
    let mut config = config();
    config.options.tool_choice = ToolChoice::Tool("fs.read_file".into());
    let out = Agent::new(script.clone(), OddNames::default())
        .with_config(config)
        .run(vec![Message::user("read")], &CancellationToken::new())
        .await;
    let requests = script.requests();
    assert_eq!(
        requests[0].options.tool_choice,
        ToolChoice::Tool(shown[1].clone())
    );
    // An invented name still takes the unknown-tool path, never sent; the names it is told it
    // can call are the ones it was shown.
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::UnknownTool)
    );
    assert!(out.calls[0].not_sent);
    let Some(Message::Tool { content, .. }) = requests[1].messages.last() else {
        panic!("expected the unknown tool's answer last");
    };
    for name in &shown {
        assert!(content.contains(name.as_str()), "{name:?} in {content}");
    }
    assert!(!content.contains("fs.read_file"), "{content}");
}

/// A name the model invents that no provider accepts (`multi_tool_use.parallel`, which OpenAI
/// models are known to write) is answered as unknown; the conversation sent next turn must
/// still hold only names the provider accepts, or every later turn is refused.
#[tokio::test]
async fn an_invented_name_the_provider_refuses_is_not_sent_back() {
    let surface = kberg_agent::LocalSurface::new(
        kberg_testkit::notes::registry_with_search(),
        kberg_core::Caller::new(kberg_testkit::notes::writer("w")),
    );
    for invented in ["multi_tool_use.parallel", "search notes", "search_notes\n"] {
        let script = ScriptedProvider::new([
            ScriptedProvider::call("c1", invented, json!({})),
            ScriptedProvider::text("Sorry."),
        ]);
        let out = Agent::new(script.clone(), surface.clone())
            .with_config(config())
            .run(vec![Message::user("search")], &CancellationToken::new())
            .await;
        assert_eq!(
            out.calls[0].outcome,
            CallOutcome::Failed(ErrorCode::UnknownTool)
        );
        assert_eq!(out.calls[0].name, invented);
        let requests = script.requests();
        let listed = listed(&requests[1]);
        for m in &requests[1].messages {
            let names: Vec<&String> = match m {
                Message::Tool { name, .. } => vec![name],
                Message::Assistant { tool_calls, .. } => {
                    tool_calls.iter().map(|c| &c.name).collect()
                }
                _ => Vec::new(),
            };
            for name in names {
                assert!(provider_safe(name), "{name:?} sent for {invented:?}");
                assert!(!listed.contains(name), "{name:?} reads as a listed tool");
            }
        }
    }
}
