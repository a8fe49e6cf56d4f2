//! The loop over remote MCP surfaces, with real servers and rmcp's real client:
//!
//! - kberg-server over Streamable HTTP on 127.0.0.1 (a free port): its gate refusals arrive as
//!   error results with a `code` in structured content, and the run's outcomes must equal the
//!   outcomes of the same script against the same registry in process;
//! - the reference TypeScript server `@modelcontextprotocol/server-everything` spawned over stdio
//!   (installed by `scripts/install-tools.sh`; `KBERG_TOOLS_DIR` overrides where the tools are):
//!   a third-party server whose error results carry no Kberg code.
//!
//! Every server is stopped when its guard drops, also when an assertion fails.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::time::Duration;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, LocalSurface, McpSurface, Message, RunOutcome,
    ScriptedProvider, StopReason, ToolSurface,
};
use kberg_core::{
    Caller, ErrorCode, Principal, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability,
};
use kberg_server::{BearerTokens, McpApp, OpenAccess};
use kberg_testkit::peers::everything_stdio_command;
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The notes app (`add_note` under `notes.write`, `wait`, the refusal `delete_all_notes`) plus
/// `purge_notes` under `notes.admin`, which no caller here holds.
fn registry() -> ToolRegistry {
    let tools = kberg_testkit::notes::registry();
    let admin = WriteCapability::new("notes.admin", "Administer notes");
    tools.declare(admin.clone()).unwrap();
    tools
        .register(
            ToolBuilder::new("purge_notes")
                .description("Remove old notes")
                .write(admin)
                .raw_handler(json!({"type": "object"}), |_, _| async {
                    Ok(ToolOutput::text("purged"))
                }),
        )
        .unwrap();
    tools
}

fn principal() -> Principal {
    kberg_testkit::notes::writer("agent")
}

/// A kberg-server serving the notes app to anyone as [`principal`]; stopped on drop.
async fn kberg_server() -> RunningServer {
    let app = McpApp::builder("notes", "1.0.0").tools(registry()).build();
    RunningServer::start(app, loopback().auth(OpenAccess::as_principal(principal()))).await
}

fn script() -> Vec<kberg_agent::ChatResponse> {
    vec![
        ScriptedProvider::call("c1", "add_note", json!({"title": "milk"})),
        ScriptedProvider::call("c2", "add_note", json!({"title": "milk", "priority": "2"})),
        ScriptedProvider::call("c3", "delete_all_notes", json!({})),
        ScriptedProvider::call("c4", "purge_notes", json!({})),
        ScriptedProvider::call("c5", "no_such_tool", json!({})),
        ScriptedProvider::text("Added milk; the rest is not allowed."),
    ]
}

fn outcomes(out: &RunOutcome) -> Vec<&'static str> {
    out.calls.iter().map(|c| c.outcome.as_str()).collect()
}

#[tokio::test]
async fn kberg_server_over_http_gives_the_same_outcomes_as_in_process() {
    let server = kberg_server().await;
    let remote = McpSurface::connect_http(&server.url).await.unwrap();
    assert!(
        remote
            .server_name()
            .unwrap_or_default()
            .starts_with("notes")
    );
    let local = LocalSurface::new(registry(), Caller::new(principal()));
    // The listed tools are the same (the refusal is never listed).
    let mut remote_names: Vec<String> = remote
        .tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    remote_names.sort();
    let mut local_names: Vec<String> = local
        .tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    local_names.sort();
    assert_eq!(remote_names, local_names);

    // Every call of the script is sent, so each surface's answer is compared: after the
    // successful `add_note`, the default loop would hold the other writes as unrequested.
    let config = || AgentConfig::default().stop_unrequested_writes(false);
    let remote_script = ScriptedProvider::new(script());
    let remote_out = Agent::new(remote_script.clone(), remote)
        .with_config(config())
        .run(
            vec![Message::user("add milk, priority 2")],
            &CancellationToken::new(),
        )
        .await;
    let local_out = Agent::new(ScriptedProvider::new(script()), local)
        .with_config(config())
        .run(
            vec![Message::user("add milk, priority 2")],
            &CancellationToken::new(),
        )
        .await;
    assert!(remote_out.answered(), "{:?}", remote_out.stop);
    assert_eq!(
        outcomes(&remote_out),
        [
            "invalid_arguments",
            "ok",
            "refused",
            "capability_required",
            "unknown_tool"
        ]
    );
    assert_eq!(outcomes(&remote_out), outcomes(&local_out));
    assert_eq!(remote_out.repair_turns, local_out.repair_turns);
    assert_eq!(remote_out.repair_turns, 1);
    // "2" became 2 before the call went out.
    assert_eq!(remote_out.calls[1].arguments["priority"], 2);
    // The model got the same per-field diagnostic and the same final refusal.
    let reqs = remote_script.requests();
    let tool_text = |i: usize| match reqs[i].messages.last() {
        Some(Message::Tool { content, .. }) => content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(tool_text(1).contains("`priority`"), "{}", tool_text(1));
    assert!(tool_text(3).contains("never offered"), "{}", tool_text(3));
    assert!(tool_text(3).contains("do not call"), "{}", tool_text(3));
}

#[tokio::test]
async fn cancellation_mid_tool_over_http() {
    let server = kberg_server().await;
    let remote = McpSurface::connect_http(&server.url).await.unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([ScriptedProvider::call("c1", "wait", json!({"seconds": 30}))]),
        remote,
    );
    let cancel = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = cancel.clone();
    let run = tokio::spawn(async move {
        agent
            .run_with_events(vec![Message::user("wait")], &c, tx)
            .await
    });
    while let Some(ev) = rx.recv().await {
        if matches!(ev, AgentEvent::ToolCalled { .. }) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cancel.cancel();
        }
    }
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Cancelled)
    );
}

#[tokio::test]
async fn bearer_token_selects_the_principal() {
    let app = McpApp::builder("notes", "1.0.0").tools(registry()).build();
    let tokens = BearerTokens::new()
        .with_token("writer-token", principal())
        .with_token("reader-token", Principal::new("reader"));
    let server = RunningServer::start(app, loopback().auth(tokens)).await;
    let url = server.url.clone();

    let e = McpSurface::connect_http_with_bearer(&url, "wrong-token")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "surface_connect");
    let e = McpSurface::connect_http(&url).await.unwrap_err();
    assert_eq!(e.code(), "surface_connect");

    let call = || {
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "add_note", json!({"title": "milk", "priority": 1})),
            ScriptedProvider::text("done"),
        ])
    };
    for (token, expected) in [
        ("writer-token", "ok"),
        ("reader-token", "capability_required"),
    ] {
        let surface = McpSurface::connect_http_with_bearer(&url, token)
            .await
            .unwrap();
        let out = Agent::new(call(), surface)
            .run(
                vec![Message::user("add milk, priority 1")],
                &CancellationToken::new(),
            )
            .await;
        assert!(out.answered(), "{:?}", out.stop);
        assert_eq!(outcomes(&out), [expected], "{token}");
    }
}

#[tokio::test]
async fn connecting_to_nothing_is_a_clear_error() {
    let base = kberg_testkit::closed_port_url();
    let e = McpSurface::connect_http(&format!("{base}/mcp"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "surface_connect");
    let addr = base.trim_start_matches("http://");
    assert!(e.to_string().contains(addr), "{e}");
}

#[tokio::test]
async fn reference_server_over_stdio() {
    let surface = McpSurface::spawn(everything_stdio_command()).await.unwrap();
    let tools = surface.tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "get-sum"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let script = ScriptedProvider::new([
        // A string where the schema says number: coerced, then it runs.
        ScriptedProvider::call("c1", "get-sum", json!({"a": "2", "b": 3})),
        // Missing `b`: the server's own validation fails; a repair turn follows.
        ScriptedProvider::call("c2", "get-sum", json!({"a": 1})),
        ScriptedProvider::call("c3", "get-sum", json!({"a": 1, "b": 4})),
        ScriptedProvider::text("2+3 is 5 and 1+4 is 5."),
    ]);
    let agent = Agent::new(script.clone(), surface);
    let out = agent
        .run(vec![Message::user("sums")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(outcomes(&out), ["ok", "tool_failed", "ok"]);
    assert_eq!(out.calls[0].coercions.len(), 1);
    assert_eq!(out.repair_turns, 1);
    let reqs = script.requests();
    match reqs[1].messages.last() {
        Some(Message::Tool {
            content, is_error, ..
        }) => {
            assert!(!is_error);
            assert!(content.contains("The sum of 2 and 3 is 5"), "{content}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn reference_server_cancellation_mid_tool() {
    let surface = McpSurface::spawn(everything_stdio_command()).await.unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([ScriptedProvider::call(
            "c1",
            "trigger-long-running-operation",
            json!({"duration": 30, "steps": 3}),
        )]),
        surface,
    );
    let cancel = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = cancel.clone();
    let run = tokio::spawn(async move {
        agent
            .run_with_events(vec![Message::user("go")], &c, tx)
            .await
    });
    while let Some(ev) = rx.recv().await {
        if matches!(ev, AgentEvent::ToolCalled { .. }) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        }
    }
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Cancelled)
    );
}
