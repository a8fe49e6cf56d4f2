//! The loop over remote MCP surfaces, with real servers and rmcp's real client:
//!
//! - kberg-server over Streamable HTTP on 127.0.0.1 (a free port): its gate refusals arrive as
//!   error results with a `code` in structured content, and the run's outcomes must equal the
//!   outcomes of the same script against the same registry in process (but for a call to a
//!   tool neither lists, which is never sent: in process the gate says why, remotely it is
//!   unknown);
//! - the reference TypeScript server `@modelcontextprotocol/server-everything` spawned over stdio
//!   (installed by `scripts/install-tools.sh`; `KBERG_TOOLS_DIR` overrides where the tools are):
//!   a third-party server whose error results carry no Kberg code;
//! - a scripted server on an in-memory pipe, which records what the client sends (the
//!   cancellation of a call).
//!
//! Every server is stopped when its guard drops, also when an assertion fails.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::time::Duration;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, LocalSurface, MAX_TOOL_LIST_PAGES, McpOptions,
    McpSurface, Message, RunOutcome, ScriptedProvider, StopReason, SurfaceError, ToolSurface,
};
use kberg_core::{
    Caller, ErrorCode, Principal, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability,
};
use kberg_server::{BearerTokens, McpApp, OpenAccess};
use kberg_testkit::peers::everything_stdio_command;
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::{Value, json};
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

/// `tools` in process (a [`LocalSurface`]) and over HTTP (an [`McpSurface`] to a kberg-server
/// serving them), both as [`principal`]; the server stops when the first value drops.
async fn in_process_and_over_http(
    tools: ToolRegistry,
) -> (RunningServer, [Box<dyn ToolSurface>; 2]) {
    let app = McpApp::builder("tools", "1.0.0")
        .tools(tools.clone())
        .build();
    let server =
        RunningServer::start(app, loopback().auth(OpenAccess::as_principal(principal()))).await;
    let remote = McpSurface::connect_http(&server.url).await.unwrap();
    let local = LocalSurface::new(tools, Caller::new(principal()));
    (server, [Box::new(local), Box::new(remote)])
}

/// The text of each tool result the model was given, in order.
fn tool_results(out: &RunOutcome) -> Vec<String> {
    out.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
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

    // Every call of the script to a listed tool is sent, so each surface's answer is compared:
    // after the successful `add_note`, the default loop would hold the other writes as
    // unrequested.
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
            "unknown_tool",
            "capability_required",
            "unknown_tool"
        ]
    );
    // The refusal is never listed, so its call is never sent, on either surface: in process
    // the gate says why without running it, a remote server cannot be asked without a call.
    let mut expected_local = outcomes(&remote_out);
    expected_local[2] = "refused";
    assert_eq!(outcomes(&local_out), expected_local);
    for out in [&remote_out, &local_out] {
        let not_sent: Vec<bool> = out.calls.iter().map(|c| c.not_sent).collect();
        assert_eq!(not_sent, [false, false, true, false, true]);
    }
    assert_eq!(remote_out.repair_turns, local_out.repair_turns);
    assert_eq!(remote_out.repair_turns, 1);
    // "2" became 2 before the call went out.
    assert_eq!(remote_out.calls[1].arguments["priority"], 2);
    // The model got the same per-field diagnostic, and a final answer to the unlisted call.
    let reqs = remote_script.requests();
    let tool_text = |i: usize| match reqs[i].messages.last() {
        Some(Message::Tool { content, .. }) => content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(tool_text(1).contains("`priority`"), "{}", tool_text(1));
    assert!(
        tool_text(3).contains("`delete_all_notes` is not a tool you can call"),
        "{}",
        tool_text(3)
    );
    assert!(tool_text(3).contains("do not call"), "{}", tool_text(3));
}

/// The agent's cancellation reaches the server's tool: the test cancels only once the tool has
/// started on the server (its own signal, not a delay), and the tool must see its call's token
/// fire, so a cancel that landed before the call went out, or that never crossed the wire,
/// fails the test.
#[tokio::test]
async fn cancellation_mid_tool_over_http() {
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (stopped_tx, stopped) = tokio::sync::oneshot::channel::<()>();
    let signals = std::sync::Mutex::new(Some((started_tx, stopped_tx)));
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("wait")
                .description("Wait until cancelled")
                .raw_handler(json!({"type": "object"}), move |_, ctx| {
                    let signals = signals.lock().unwrap().take();
                    async move {
                        let Some((started, stopped)) = signals else {
                            return Ok(ToolOutput::text("called twice"));
                        };
                        let _ = started.send(());
                        ctx.cancellation().cancelled().await;
                        let _ = stopped.send(());
                        Err("stopped".into())
                    }
                }),
        )
        .unwrap();
    let app = McpApp::builder("waiter", "1.0.0").tools(tools).build();
    let server =
        RunningServer::start(app, loopback().auth(OpenAccess::as_principal(principal()))).await;
    let remote = McpSurface::connect_http(&server.url).await.unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([ScriptedProvider::call("c1", "wait", json!({}))]),
        remote,
    );
    let cancel = CancellationToken::new();
    let (tx, _events) = tokio::sync::mpsc::unbounded_channel();
    let c = cancel.clone();
    let run = tokio::spawn(async move {
        agent
            .run_with_events(vec![Message::user("wait")], &c, tx)
            .await
    });
    tokio::time::timeout(kberg_testkit::WAIT, started)
        .await
        .expect("the tool started on the server")
        .unwrap();
    cancel.cancel();
    tokio::time::timeout(kberg_testkit::WAIT, stopped)
        .await
        .expect("the cancellation reached the server's tool")
        .unwrap();
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Cancelled)
    );
}

/// Runs a scripted MCP server on an in-memory pipe: each message the client sends is handed to
/// `answer`, and what it returns is written back as one line. Returns every message read, once
/// the client has gone.
async fn scripted_pipe(
    io: tokio::io::DuplexStream,
    mut answer: impl FnMut(&Value) -> Option<Value>,
) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (read, mut write) = tokio::io::split(io);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut seen = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let msg: Value = serde_json::from_str(&line).unwrap();
        if let Some(answer) = answer(&msg) {
            write
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .unwrap();
        }
        seen.push(msg);
    }
    seen
}

/// The answer to `initialize` of a scripted server named `name` that offers tools.
fn initialized(msg: &Value, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
        "protocolVersion": msg["params"]["protocolVersion"],
        "capabilities": {"tools": {}},
        "serverInfo": {"name": name, "version": "1"}
    }})
}

/// A scripted MCP server on an in-memory pipe: answers `initialize` and `tools/list` (one tool,
/// `wait`), never answers `tools/call` (it signals `called` instead), signals `cancelled` when
/// it is told a request was cancelled, refuses anything else, and returns every message it
/// read once the client has gone.
async fn silent_server(
    io: tokio::io::DuplexStream,
    called: tokio::sync::oneshot::Sender<()>,
    cancelled: tokio::sync::oneshot::Sender<()>,
) -> Vec<Value> {
    let mut called = Some(called);
    let mut cancelled = Some(cancelled);
    scripted_pipe(io, |msg| {
        let result = match msg["method"].as_str() {
            Some("initialize") => return Some(initialized(msg, "silent")),
            Some("tools/list") => Some(json!({
                "tools": [{"name": "wait", "inputSchema": {"type": "object"}}]
            })),
            Some("tools/call") => {
                if let Some(c) = called.take() {
                    let _ = c.send(());
                }
                None
            }
            Some("notifications/cancelled") => {
                if let Some(c) = cancelled.take() {
                    let _ = c.send(());
                }
                None
            }
            _ => None,
        };
        match (msg.get("id"), result) {
            (Some(id), Some(result)) => Some(json!({"jsonrpc": "2.0", "id": id, "result": result})),
            (Some(id), None) if msg["method"] != "tools/call" => Some(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "not served here"}
            })),
            _ => None,
        }
    })
    .await
}

/// A surface connected to [`silent_server`], with the server's task and signals.
struct Silent {
    server: tokio::task::JoinHandle<Vec<Value>>,
    called: tokio::sync::oneshot::Receiver<()>,
    cancelled: tokio::sync::oneshot::Receiver<()>,
    surface: McpSurface,
}

async fn silent() -> Silent {
    use rmcp::ServiceExt;
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (called_tx, called) = tokio::sync::oneshot::channel();
    let (cancelled_tx, cancelled) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(silent_server(server_io, called_tx, cancelled_tx));
    let client = ().serve(tokio::io::split(client_io)).await.unwrap();
    Silent {
        server,
        called,
        cancelled,
        surface: McpSurface::from_client(client),
    }
}

/// An agent whose model calls `wait` once.
fn waiting_agent(surface: McpSurface) -> Agent {
    Agent::new(
        ScriptedProvider::new([ScriptedProvider::call("c1", "wait", json!({}))]),
        surface,
    )
}

/// Waits for the silent server to close and checks that the client cancelled its call.
async fn assert_call_cancelled(server: tokio::task::JoinHandle<Vec<Value>>) {
    let seen = tokio::time::timeout(kberg_testkit::WAIT, server)
        .await
        .expect("the connection closed")
        .unwrap();
    let call = seen
        .iter()
        .find(|m| m["method"] == "tools/call")
        .expect("the call");
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/cancelled"
                && m["params"]["requestId"] == call["id"]),
        "no cancellation of the call was sent: {seen:#?}"
    );
}

/// On the wire: a run cancelled mid-call sends `notifications/cancelled` for that call before
/// the call returns, so the server hears of it although the run ends, and its surface is
/// dropped, right after (a notice still queued then would be lost with the connection).
#[tokio::test]
async fn a_cancelled_call_is_cancelled_on_the_wire_before_the_run_ends() {
    let s = silent().await;
    let agent = waiting_agent(s.surface);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let run = tokio::spawn(async move { agent.run(vec![Message::user("wait")], &c).await });
    tokio::time::timeout(kberg_testkit::WAIT, s.called)
        .await
        .expect("the call reached the server")
        .unwrap();
    cancel.cancel();
    // The run ends, and the agent with its surface and connection goes with the task.
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_call_cancelled(s.server).await;
}

/// A run dropped mid-call (not cancelled: its future aborted, its agent kept) still cancels the
/// call on the server.
#[tokio::test]
async fn a_run_dropped_mid_call_cancels_the_call_on_the_wire() {
    let s = silent().await;
    let agent = std::sync::Arc::new(waiting_agent(s.surface));
    let running = std::sync::Arc::clone(&agent);
    let run = tokio::spawn(async move {
        running
            .run(vec![Message::user("wait")], &CancellationToken::new())
            .await
    });
    tokio::time::timeout(kberg_testkit::WAIT, s.called)
        .await
        .expect("the call reached the server")
        .unwrap();
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    tokio::time::timeout(kberg_testkit::WAIT, s.cancelled)
        .await
        .expect("the dropped call was cancelled on the server")
        .unwrap();
    drop(agent);
    assert_call_cancelled(s.server).await;
}

#[tokio::test]
async fn bearer_token_selects_the_principal() {
    let app = McpApp::builder("notes", "1.0.0").tools(registry()).build();
    let tokens = BearerTokens::new()
        .with_token("writer-token", principal())
        .with_token("reader-token", Principal::new("reader"));
    let server = RunningServer::start(app, loopback().auth(tokens)).await;
    let url = server.url.clone();

    // A refused token and a missing one are told apart, in words that name no client-library
    // type, with what to do.
    let refused = McpSurface::connect_http_with_bearer(&url, "wrong-token")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "surface_connect");
    let refused = refused.to_string();
    assert!(
        refused.contains("refused the bearer token (401"),
        "{refused}"
    );
    let missing = McpSurface::connect_http(&url).await.unwrap_err();
    assert_eq!(missing.code(), "surface_connect");
    let missing = missing.to_string();
    assert!(missing.contains("wants credentials (401"), "{missing}");
    assert!(missing.contains("bearer token"), "{missing}");
    for e in [&refused, &missing] {
        assert!(e.contains(&url), "{e}");
        for internal in ["rmcp::", "WorkerTransport", "Send message error"] {
            assert!(!e.contains(internal), "{e}");
        }
    }

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

/// A URL's credentials (its user part, a `?key=` in its query) and the bearer token never
/// reach the error of a connection that failed: it names the host, redacted.
#[tokio::test]
async fn a_failed_connection_names_the_url_without_its_credentials() {
    let base = kberg_testkit::closed_port_url();
    let addr = base.trim_start_matches("http://");
    let url = format!("http://CANARY-user:CANARY-pass@{addr}/mcp?key=CANARY-query");
    let e = McpSurface::connect_http_with(
        &url,
        &kberg_agent::McpOptions::default().bearer("CANARY-token"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), "surface_connect");
    assert!(e.to_string().contains(addr), "{e}");
    assert!(!e.to_string().contains("CANARY"), "{e}");
    assert!(!format!("{e:?}").contains("CANARY"), "{e:?}");
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

/// What a tool result's non-text blocks become for the model: an embedded resource's text is
/// read (a file's contents returned as a resource, as many servers return them), also when it
/// comes as base64 bytes of a text type, and a link gives its name, URI and description.
#[tokio::test]
async fn the_model_reads_a_results_embedded_resources_and_links() {
    let surface = McpSurface::spawn(everything_stdio_command()).await.unwrap();
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 2}),
        ),
        ScriptedProvider::call(
            "c2",
            "get-resource-reference",
            json!({"resourceType": "Blob", "resourceId": 3}),
        ),
        ScriptedProvider::call("c3", "get-resource-links", json!({"count": 2})),
        ScriptedProvider::text("Read them."),
    ]);
    let out = Agent::new(script.clone(), surface)
        .run(vec![Message::user("resources")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(outcomes(&out), ["ok", "ok", "ok"]);
    let results = tool_results(&out);
    let [text, blob, links] = &results[..] else {
        panic!("{results:?}");
    };
    assert!(
        text.contains("Resource 2: This is a plaintext resource created at"),
        "{text}"
    );
    assert!(text.contains("demo://resource/dynamic/text/2"), "{text}");
    // Sent as base64 under `text/plain`: read as text.
    assert!(blob.contains("demo://resource/dynamic/blob/3"), "{blob}");
    assert!(
        blob.contains("Resource 3: This is a base64 blob created at"),
        "{blob}"
    );
    assert!(links.contains("Blob Resource 1"), "{links}");
    assert!(links.contains("demo://resource/dynamic/blob/1"), "{links}");
    assert!(links.contains("Text Resource 2"), "{links}");
    assert!(links.contains("demo://resource/dynamic/text/2"), "{links}");
    assert!(links.contains("Resource 2: "), "the description: {links}");
}

/// A block the server meant for the user only (MCP `annotations.audience: ["user"]`) is not
/// given to the model, which is told that the user was shown something; the app gets its text
/// (`ToolResult::user_text`, and the result's event) to show. A block for the model, or for
/// both, is read as before.
#[tokio::test]
async fn blocks_for_the_user_only_are_not_given_to_the_model() {
    let surface = McpSurface::spawn(everything_stdio_command()).await.unwrap();
    let direct = surface
        .call(
            "get-annotated-message",
            json!({"messageType": "success", "includeImage": true}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!direct.is_error, "{direct:?}");
    assert!(
        !direct.text.contains("Operation completed successfully"),
        "{}",
        direct.text
    );
    assert!(!direct.text.contains("image/png"), "{}", direct.text);
    assert!(
        direct.text.contains("2 blocks for the user only"),
        "{}",
        direct.text
    );
    assert_eq!(
        direct.user_text,
        "Operation completed successfully\n[image image/png]"
    );

    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "get-annotated-message",
            json!({"messageType": "success"}),
        ),
        ScriptedProvider::call(
            "c2",
            "get-annotated-message",
            json!({"messageType": "debug"}),
        ),
        ScriptedProvider::call(
            "c3",
            "get-annotated-message",
            json!({"messageType": "error"}),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = Agent::new(script.clone(), surface)
        .run_with_events(
            vec![Message::user("messages")],
            &CancellationToken::new(),
            tx,
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let results = tool_results(&out);
    assert_eq!(
        results,
        [
            "[1 block for the user only, not shown to you]",
            "Debug: Cache hit ratio 0.95, latency 150ms",
            "Error: Operation failed",
        ]
    );
    let mut for_user = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        if let AgentEvent::ToolResult {
            call_id, user_text, ..
        } = ev
        {
            for_user.push(format!("{call_id}: {user_text}"));
        }
    }
    assert_eq!(
        for_user,
        ["c1: Operation completed successfully", "c2: ", "c3: "]
    );
    // A run without events keeps them too, with its calls.
    let kept: Vec<&str> = out.calls.iter().map(|c| c.user_text.as_str()).collect();
    assert_eq!(kept, ["Operation completed successfully", "", ""]);
}

/// A Kberg tool's blocks for the user only are read as a remote server's are, in process and
/// over HTTP alike.
#[tokio::test]
async fn annotated_blocks_read_alike_in_process_and_over_http() {
    use kberg_core::{Annotations, Content, Role};
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("deploy")
                .description("Deploy")
                .raw_handler(json!({"type": "object"}), |_, _| async {
                    Ok(ToolOutput::contents(vec![
                        Content::text("Deployed build 42.")
                            .annotated(Annotations::for_audience([Role::Assistant])),
                        Content::text("Your site is live.")
                            .annotated(Annotations::for_audience([Role::User])),
                        Content::text("Log: 3 files changed."),
                    ]))
                }),
        )
        .unwrap();
    let (_server, surfaces) = in_process_and_over_http(tools).await;
    for surface in surfaces {
        let r = surface
            .call("deploy", json!({}), CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            r.text,
            "Deployed build 42.\nLog: 3 files changed.\n[1 block for the user only, not shown to you]"
        );
        assert_eq!(r.user_text, "Your site is live.");
    }
}

/// A result with structured content and no block for the model (none at all, or only blocks
/// for the user) is read as its structured content, in process and over HTTP alike, with the
/// note of what the user was shown.
#[tokio::test]
async fn structured_content_is_read_when_no_block_is_for_the_model() {
    use kberg_core::{Annotations, Content, Role};
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("count")
                .description("Count")
                .raw_handler(json!({"type": "object"}), |_, _| async {
                    Ok(ToolOutput::default().with_structured(json!({"notes": 2})))
                }),
        )
        .unwrap();
    tools
        .register(ToolBuilder::new("chart").description("Chart").raw_handler(
            json!({"type": "object"}),
            |_, _| async {
                Ok(ToolOutput::contents(vec![
                    Content::text("Here is your chart.")
                        .annotated(Annotations::for_audience([Role::User])),
                ])
                .with_structured(json!({"points": [1, 2]})))
            },
        ))
        .unwrap();
    let (_server, surfaces) = in_process_and_over_http(tools).await;
    for surface in surfaces {
        let r = surface
            .call("count", json!({}), CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(r.text, r#"{"notes":2}"#);
        let r = surface
            .call("chart", json!({}), CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            r.text,
            "{\"points\":[1,2]}\n[1 block for the user only, not shown to you]"
        );
        assert_eq!(r.user_text, "Here is your chart.");
    }
}

/// The same blocks from a Kberg tool read alike in process and over HTTP.
#[tokio::test]
async fn embedded_resources_read_alike_in_process_and_over_http() {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("open_file")
                .description("Open a file")
                .raw_handler(json!({"type": "object"}), |_, _| async {
                    Ok(ToolOutput::contents(vec![
                        kberg_core::Content::text("The file:"),
                        kberg_core::Content::Resource(kberg_core::ResourceContents::text(
                            "file:///src/lib.rs",
                            Some("text/x-rust"),
                            "pub fn parse() {}",
                        )),
                        kberg_core::Content::Resource(kberg_core::ResourceContents::blob(
                            "file:///logo.png",
                            Some("image/png"),
                            vec![0x89, b'P', b'N', b'G'],
                        )),
                        kberg_core::Content::ResourceLink {
                            uri: "file:///README.md".into(),
                            name: "README.md".into(),
                            title: None,
                            description: Some("How to build".into()),
                            mime_type: Some("text/markdown".into()),
                            size: None,
                            icons: vec![],
                        },
                    ]))
                }),
        )
        .unwrap();
    let (_server, surfaces) = in_process_and_over_http(tools).await;
    let read = |surface: Box<dyn ToolSurface>| async move {
        let script = ScriptedProvider::new([
            ScriptedProvider::call("c1", "open_file", json!({})),
            ScriptedProvider::text("Done."),
        ]);
        let out = Agent::from_arcs(std::sync::Arc::new(script), std::sync::Arc::from(surface))
            .run(vec![Message::user("open")], &CancellationToken::new())
            .await;
        assert!(out.answered(), "{:?}", out.stop);
        out.messages
            .iter()
            .find_map(|m| match m {
                Message::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap()
    };
    let [local, remote] = surfaces;
    let in_process = read(local).await;
    let over_http = read(remote).await;
    assert_eq!(in_process, over_http);
    for part in [
        "The file:",
        "file:///src/lib.rs",
        "pub fn parse() {}",
        "file:///logo.png",
        "image/png",
        "README.md",
        "file:///README.md",
        "How to build",
    ] {
        assert!(in_process.contains(part), "{part}: {in_process}");
    }
    // The image's bytes are named, not shown (neither as base64 nor as bytes).
    assert!(in_process.contains("binary, not shown"), "{in_process}");
    assert!(!in_process.contains("PNG"), "{in_process}");
}

/// The agent cancels once the reference server's tool has started: its first progress report
/// (the tool reports after each of its 0.1 s steps) is the signal, not a delay.
#[tokio::test]
async fn reference_server_cancellation_mid_tool() {
    let surface = McpSurface::spawn(everything_stdio_command()).await.unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([ScriptedProvider::call(
            "c1",
            "trigger-long-running-operation",
            json!({"duration": 30, "steps": 300}),
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
    let mut reports = Vec::new();
    while let Some(ev) = rx.recv().await {
        if let AgentEvent::ToolProgress {
            call_id,
            progress,
            total,
            ..
        } = ev
        {
            reports.push((call_id, progress, total));
            cancel.cancel();
        }
    }
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Cancelled)
    );
    assert!(
        reports.first() == Some(&("c1".to_string(), 1.0, Some(300.0))),
        "{reports:?}"
    );
}

/// Over HTTP, a Kberg server's tool reports progress and each report reaches the run's events
/// while the tool still runs (the tool goes on only once the test has seen the report).
#[tokio::test]
async fn a_remote_tools_progress_reaches_the_runs_events() {
    let (seen_tx, seen_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let seen_rx = tokio::sync::Mutex::new(seen_rx);
    let seen_rx = std::sync::Arc::new(seen_rx);
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("index")
                .description("Index the repository")
                .raw_handler(json!({"type": "object"}), move |_, ctx| {
                    let seen = std::sync::Arc::clone(&seen_rx);
                    async move {
                        for (done, message) in [(1.0, "reading"), (2.0, "writing")] {
                            ctx.progress(done, Some(2.0), Some(message))
                                .await
                                .map_err(|e| e.to_string())?;
                            // Until the agent's side has seen it.
                            seen.lock().await.recv().await;
                        }
                        Ok(ToolOutput::text("indexed"))
                    }
                }),
        )
        .unwrap();
    let app = McpApp::builder("indexer", "1.0.0").tools(tools).build();
    let server =
        RunningServer::start(app, loopback().auth(OpenAccess::as_principal(principal()))).await;
    let agent = Agent::new(
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "index", json!({})),
            ScriptedProvider::text("done"),
        ]),
        McpSurface::connect_http(&server.url).await.unwrap(),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(async move {
        agent
            .run_with_events(vec![Message::user("index")], &CancellationToken::new(), tx)
            .await
    });
    let mut seen = Vec::new();
    while let Some(ev) = tokio::time::timeout(kberg_testkit::WAIT, rx.recv())
        .await
        .expect("the run goes on")
    {
        match ev {
            AgentEvent::ToolProgress {
                call_id,
                name,
                progress,
                total,
                message,
            } => {
                seen.push(format!(
                    "{call_id} {name} {progress}/{total:?} {}",
                    message.unwrap_or_default()
                ));
                seen_tx.send(()).unwrap();
            }
            AgentEvent::ToolResult { call_id, text, .. } => {
                seen.push(format!("result {call_id}: {text}"));
            }
            _ => {}
        }
    }
    let out = run.await.unwrap();
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(
        seen,
        [
            "c1 index 1/Some(2.0) reading",
            "c1 index 2/Some(2.0) writing",
            "result c1: indexed",
        ]
    );
}

/// A scripted MCP server on an in-memory pipe whose one tool, `index`, reports progress under
/// whatever token the call carries: a report for another token (at 0.5), a good one, one that does not
/// advance, one whose figure is not a number, and a last good one; then it waits for `go`
/// before it answers. It returns every message it read once the client has gone.
async fn progress_server(
    io: tokio::io::DuplexStream,
    go: tokio::sync::oneshot::Receiver<()>,
) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (read, mut write) = tokio::io::split(io);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut go = Some(go);
    let mut seen = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let msg: Value = serde_json::from_str(&line).unwrap();
        let mut out = Vec::new();
        match msg["method"].as_str() {
            Some("initialize") => out.push(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "progress", "version": "1"}
            }})),
            Some("tools/list") => out.push(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "tools": [{"name": "index", "inputSchema": {"type": "object"}}]
            }})),
            Some("tools/call") => {
                let token = &msg["params"]["_meta"]["progressToken"];
                let report = |token: &Value, progress: Value| {
                    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                        "progressToken": token, "progress": progress, "total": 3,
                        "message": format!("at {progress}")
                    }})
                };
                if !token.is_null() {
                    out.push(report(&json!("someone-else"), json!(0.5)));
                    out.push(report(token, json!(1)));
                    out.push(report(token, json!(1)));
                    out.push(report(token, json!("two")));
                    out.push(report(token, json!(2.5)));
                }
                for m in out.drain(..) {
                    write.write_all(format!("{m}\n").as_bytes()).await.unwrap();
                }
                if let Some(go) = go.take() {
                    let _ = go.await;
                }
                out.push(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "content": [{"type": "text", "text": "indexed"}]
                }}));
            }
            _ => {}
        }
        seen.push(msg);
        for m in out {
            write.write_all(format!("{m}\n").as_bytes()).await.unwrap();
        }
    }
    seen
}

/// A scripted MCP server on an in-memory pipe whose `tools/list` misbehaves: `endless` answers
/// every page with a new cursor, `repeating` always with the same one, `silent` never answers.
/// It returns how many `tools/list` requests it read once the client has gone.
async fn listing_server(io: tokio::io::DuplexStream, how: &'static str) -> usize {
    let mut pages = 0;
    scripted_pipe(io, |msg| match msg["method"].as_str() {
        Some("initialize") => Some(initialized(msg, "listing")),
        Some("tools/list") => {
            pages += 1;
            let cursor = match how {
                "endless" => format!("page-{pages}"),
                "repeating" => "again".to_string(),
                _ => return None,
            };
            Some(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "tools": [{"name": format!("tool_{pages}"), "inputSchema": {"type": "object"}}],
                "nextCursor": cursor
            }}))
        }
        _ => None,
    })
    .await
    .iter()
    .filter(|m| m["method"] == "tools/list")
    .count()
}

/// The tool listing is bounded: a list that never ends is refused after
/// [`MAX_TOOL_LIST_PAGES`] pages, one that repeats a cursor at the repeat, both as malformed
/// answers, so the server can neither hold the run nor grow the list for ever.
#[tokio::test]
async fn a_tool_list_that_never_ends_is_refused() {
    for (how, pages, says) in [
        (
            "endless",
            MAX_TOOL_LIST_PAGES,
            "did not end after 100 pages",
        ),
        ("repeating", 2, "repeats a page cursor"),
    ] {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(listing_server(server_io, how));
        let surface = McpSurface::serve(tokio::io::split(client_io))
            .await
            .unwrap();
        let err = surface.tools().await.unwrap_err();
        assert!(
            matches!(&err, SurfaceError::Malformed(m) if m.contains(says)),
            "{how}: {err}"
        );
        drop(surface);
        assert_eq!(server.await.unwrap(), pages, "{how}");
    }
}

/// A `tools/list` the server never answers fails after 30 s (on the paused clock) instead of
/// holding the run.
#[tokio::test(start_paused = true)]
async fn a_tool_list_never_answered_times_out() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(listing_server(server_io, "silent"));
    let surface = McpSurface::serve(tokio::io::split(client_io))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = surface.tools().await.unwrap_err();
    assert!(
        matches!(&err, SurfaceError::Transport(m) if m.contains("within 30 s")),
        "{err}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    drop(surface);
    assert_eq!(server.await.unwrap(), 1);
}

/// A scripted MCP server on an in-memory pipe that answers `tools/call` with a task, then
/// answers nothing more: neither `tasks/get` nor `tasks/cancel`. It tells `polled` when the
/// first `tasks/get` arrives, and returns the methods it read once the client has gone.
async fn mute_task_server(
    io: tokio::io::DuplexStream,
    polled: tokio::sync::mpsc::UnboundedSender<()>,
) -> Vec<String> {
    scripted_pipe(io, |msg| match msg["method"].as_str() {
        Some("initialize") => Some(initialized(msg, "mute")),
        Some("tools/call") => Some(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "resultType": "task", "taskId": "t-1", "status": "working",
            "createdAt": "2026-12-05T00:00:00Z", "lastUpdatedAt": "2026-12-05T00:00:00Z",
            "ttlMs": null, "pollIntervalMs": 1000
        }})),
        Some("tasks/get") => {
            let _ = polled.send(());
            None
        }
        _ => None,
    })
    .await
    .iter()
    .filter_map(|m| m["method"].as_str().map(str::to_string))
    .collect()
}

/// A call that started a task on `mute_task_server`: the call (with `cancel`, on a task of its
/// own that drops the surface once the call returns) and the server, once the server saw the
/// task's first poll.
type MuteTaskCall = (
    tokio::task::JoinHandle<Result<kberg_agent::ToolResult, SurfaceError>>,
    tokio::task::JoinHandle<Vec<String>>,
);

async fn call_a_mute_task(cancel: CancellationToken) -> MuteTaskCall {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (polled_tx, mut polled) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(mute_task_server(server_io, polled_tx));
    let surface = McpSurface::serve(tokio::io::split(client_io))
        .await
        .unwrap();
    let call = tokio::spawn(async move { surface.call("index", json!({}), cancel).await });
    polled.recv().await.expect("the task was polled");
    (call, server)
}

/// Cancelling a call whose task the server neither reports on nor cancels returns `cancelled`
/// once `tasks/cancel` has waited its 2 s (on the paused clock), instead of holding the call.
#[tokio::test(start_paused = true)]
async fn a_task_cancel_the_server_never_answers_does_not_hold_the_call() {
    let cancel = CancellationToken::new();
    let (call, server) = call_a_mute_task(cancel.clone()).await;
    let cancelled_at = tokio::time::Instant::now();
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the cancelled call returns")
        .unwrap()
        .unwrap();
    assert_eq!(result.code, Some(ErrorCode::Cancelled), "{result:?}");
    assert_eq!(cancelled_at.elapsed(), Duration::from_secs(2));
    let seen = server.await.unwrap();
    assert!(seen.iter().any(|m| m == "tasks/cancel"), "{seen:?}");
}

/// A server that refuses `tasks/cancel` with an error whose message holds a line break: the
/// debug line saying the task was not cancelled writes the message escaped, so the server
/// cannot start a log line of its own.
#[tokio::test]
async fn a_refused_task_cancel_cannot_forge_a_log_line() {
    let logs = kberg_testkit::log::LogBuffer::global(tracing::Level::DEBUG);
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (polled_tx, mut polled) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(scripted_pipe(server_io, move |msg| {
        match msg["method"].as_str() {
            Some("initialize") => Some(initialized(msg, "refusing")),
            Some("tools/call") => Some(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "resultType": "task", "taskId": "t-1", "status": "working",
                "createdAt": "2026-12-05T00:00:00Z", "lastUpdatedAt": "2026-12-05T00:00:00Z",
                "ttlMs": null, "pollIntervalMs": 1000
            }})),
            Some("tasks/get") => {
                let _ = polled_tx.send(());
                None
            }
            Some("tasks/cancel") => Some(json!({"jsonrpc": "2.0", "id": msg["id"], "error": {
                "code": -32602, "message": "refused\nforged-by-the-server: all good"
            }})),
            _ => None,
        }
    }));
    let surface = McpSurface::serve(tokio::io::split(client_io))
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let call = {
        let cancel = cancel.clone();
        tokio::spawn(async move { surface.call("index", json!({}), cancel).await })
    };
    polled.recv().await.expect("the task was polled");
    cancel.cancel();
    let result = call.await.unwrap().unwrap();
    assert_eq!(result.code, Some(ErrorCode::Cancelled), "{result:?}");
    let log = logs.text();
    assert!(
        log.contains("forged-by-the-server"),
        "the refusal is logged: {log}"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("forged-by-the-server")),
        "a server's words started a log line: {log}"
    );
    server.await.unwrap();
}

/// A call whose task the server stops answering polls for ends once one `tasks/get` has gone
/// 30 s without an answer (on the paused clock), as a transport error, and cancels the task.
#[tokio::test(start_paused = true)]
async fn a_task_poll_the_server_never_answers_ends_the_call() {
    let (call, server) = call_a_mute_task(CancellationToken::new()).await;
    let polled_at = tokio::time::Instant::now();
    let err = call.await.unwrap().unwrap_err();
    // 30 s for the poll's answer, then at most 2 s for the task's cancellation.
    assert_eq!(polled_at.elapsed(), Duration::from_secs(32));
    assert!(
        matches!(&err, SurfaceError::Transport(m)
            if m == "the server did not answer `tasks/get` for the task of `index` within 30 s"),
        "{err:?}"
    );
    let seen = server.await.unwrap();
    assert_eq!(
        seen.iter().filter(|m| *m == "tasks/get").count(),
        1,
        "{seen:?}"
    );
    assert!(seen.iter().any(|m| m == "tasks/cancel"), "{seen:?}");
}

/// On the wire: a call made for a run with events carries a progress token of its own (beside
/// the tasks extension), and only the reports for that token that advance reach the events; a
/// malformed report neither reaches them nor breaks the session.
#[tokio::test]
async fn only_a_calls_own_advancing_progress_reaches_the_events() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (go_tx, go) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(progress_server(server_io, go));
    let surface = McpSurface::serve(tokio::io::split(client_io))
        .await
        .unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "index", json!({"path": "a"})),
            ScriptedProvider::call("c2", "index", json!({"path": "b"})),
            ScriptedProvider::text("done"),
        ]),
        surface,
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(async move {
        agent
            .run_with_events(vec![Message::user("index")], &CancellationToken::new(), tx)
            .await
    });
    let mut go = Some(go_tx);
    let mut reports = Vec::new();
    while let Some(ev) = tokio::time::timeout(kberg_testkit::WAIT, rx.recv())
        .await
        .expect("the run goes on")
    {
        if let AgentEvent::ToolProgress {
            call_id,
            progress,
            message,
            ..
        } = ev
        {
            reports.push((call_id, progress, message.unwrap()));
            // The last report of the first call is in: let the server answer.
            if progress == 2.5 {
                go.take().map(|g| g.send(()));
            }
        }
    }
    let out = run.await.unwrap();
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(outcomes(&out), ["ok", "ok"]);
    // The second call's reports raced its answer (the server did not wait): whatever of them
    // arrived came in order and under its own id.
    let first: Vec<_> = reports.iter().filter(|r| r.0 == "c1").collect();
    assert_eq!(
        first,
        [
            &("c1".to_string(), 1.0, "at 1".to_string()),
            &("c1".to_string(), 2.5, "at 2.5".to_string())
        ]
    );
    assert!(
        reports.iter().all(|r| r.0 == "c1" || r.0 == "c2"),
        "{reports:?}"
    );
    let seen = server.await.unwrap();
    let tokens: Vec<&Value> = seen
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| &m["params"]["_meta"]["progressToken"])
        .collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.iter().all(|t| !t.is_null()), "{tokens:?}");
    assert_ne!(tokens[0], tokens[1], "each call has a token of its own");
}

/// A surface built on a client the app connected itself relays no progress (the client's
/// handler is the app's): the server's reports for its call reach no event.
#[tokio::test]
async fn a_surface_from_an_apps_client_relays_no_progress() {
    use rmcp::ServiceExt;
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (go_tx, go) = tokio::sync::oneshot::channel();
    go_tx.send(()).unwrap();
    let server = tokio::spawn(progress_server(server_io, go));
    let client = ().serve(tokio::io::split(client_io)).await.unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "index", json!({})),
            ScriptedProvider::text("done"),
        ]),
        McpSurface::from_client(client),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = agent
        .run_with_events(vec![Message::user("index")], &CancellationToken::new(), tx)
        .await;
    drop(agent);
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(outcomes(&out), ["ok"]);
    let seen = server.await.unwrap();
    let call = seen.iter().find(|m| m["method"] == "tools/call").unwrap();
    assert!(
        !call["params"]["_meta"]["progressToken"].is_null(),
        "{call}"
    );
    while let Ok(ev) = rx.try_recv() {
        assert!(!matches!(ev, AgentEvent::ToolProgress { .. }), "{ev:?}");
    }
}

/// A bound on waits that must end long before it: reaching it fails the test instead of
/// hanging it.
const NEVER: Duration = kberg_testkit::WAIT;

/// A short connect timeout.
fn impatient() -> McpOptions {
    McpOptions::default().connect_timeout(Duration::from_millis(300))
}

fn is_connect_timeout(r: Result<McpSurface, SurfaceError>) {
    match r {
        Err(SurfaceError::Connect(m)) => assert!(m.contains("initialize"), "{m}"),
        Err(e) => panic!("not the connect error: {e}"),
        Ok(_) => panic!("connected to a server that never answers"),
    }
}

#[tokio::test]
async fn a_stdio_server_that_never_answers_initialize_is_given_up_and_stopped() {
    // The test can only see the server stopped if it had started before the connect timeout
    // gave up on it; on a machine too busy for `sh` to start within the timeout, the attempt
    // proves nothing and is made again with twice the timeout.
    let mut timeout = Duration::from_secs(2);
    for _ in 0..4 {
        if silent_stdio_server_is_stopped(timeout).await {
            return;
        }
        timeout *= 2;
    }
    panic!("the silent server never started within a connect timeout");
}

/// Spawns a stdio server that never answers with `connect_timeout`; once `spawn_with` gives
/// up, checks that the server process is gone. `false` when the server had not started when
/// the timeout ended it (nothing proven either way).
async fn silent_stdio_server_is_stopped(connect_timeout: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    use tokio::net::unix::pipe;
    let dir = std::env::temp_dir().join(format!(
        "kberg-agent-silent-{}-{}",
        std::process::id(),
        connect_timeout.as_millis()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("alive");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // The server: `sleep`, which reads nothing and writes nothing. Before it starts it opens
    // the fifo and writes `r` into it, and holds it open as long as it lives, so a reader of
    // the fifo reaches its end exactly when the process is gone.
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(r#"exec 3<>"$1"; printf r >&3; exec sleep 3600"#)
        .arg("sh")
        .arg(&fifo);
    // Read-write, so it opens without a writer and its reads wait for one.
    let mut first = pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&fifo)
        .unwrap();
    let started = tokio::spawn(async move {
        let mut r = [0u8; 1];
        first.read_exact(&mut r).await.map(|_| first)
    });
    let options = McpOptions::default().connect_timeout(connect_timeout);
    let spawned = tokio::time::timeout(NEVER, McpSurface::spawn_with(command, &options))
        .await
        .expect("spawn_with did not give up");
    is_connect_timeout(spawned);
    // The `r` of a server that started is in the fifo by now (the server was stopped after
    // writing it); one that was stopped before it started never writes it.
    let Ok(first) = tokio::time::timeout(Duration::from_secs(1), started).await else {
        let _ = std::fs::remove_dir_all(&dir);
        return false;
    };
    let first = first.unwrap().unwrap();
    // Now only the server holds the fifo open for writing: a reader sees its end once the
    // server is gone.
    let mut last = pipe::OpenOptions::new().open_receiver(&fifo).unwrap();
    drop(first);
    tokio::time::timeout(NEVER, last.read_to_end(&mut Vec::new()))
        .await
        .expect("the server process was not stopped")
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    true
}

#[tokio::test]
async fn an_http_endpoint_that_never_answers_initialize_is_given_up() {
    // A port that takes connections (the kernel completes them) and never answers a request.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let connected = tokio::time::timeout(NEVER, McpSurface::connect_http_with(&url, &impatient()))
        .await
        .expect("connect_http_with did not give up");
    is_connect_timeout(connected);
    drop(listener);
}

#[tokio::test]
async fn a_pipe_that_never_answers_initialize_is_given_up() {
    let (client_io, _silent) = tokio::io::duplex(64 * 1024);
    let served = tokio::time::timeout(
        NEVER,
        McpSurface::serve_with(tokio::io::split(client_io), &impatient()),
    )
    .await
    .expect("serve_with did not give up");
    is_connect_timeout(served);
}

/// The reference server reports progress after each step of its long operation and answers
/// right after the last report: every report reaches the call's sink, in order, before the call
/// returns. (rmcp hands each notification to a task of its own; a report handled after the
/// answer found its route gone and was lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_server_progress_arrives_whole_and_in_order_before_the_answer() {
    let surface = McpSurface::spawn(everything_stdio_command()).await.unwrap();
    for call in 0..5 {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = {
            let seen = std::sync::Arc::clone(&seen);
            kberg_agent::ProgressSink::new(move |r| seen.lock().unwrap().push(r.progress))
        };
        let out = surface
            .call_with_progress(
                "trigger-long-running-operation",
                json!({"duration": 0.3, "steps": 3}),
                CancellationToken::new(),
                sink,
            )
            .await
            .unwrap();
        assert!(!out.is_error, "{out:?}");
        assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.0, 3.0], "call {call}");
    }
}

/// A sink that panics (the app's code) loses the report it was given, not the session: the
/// call still gets its answer, and the surface goes on serving calls. (Reports are delivered on
/// the task that reads the connection; a panic there ended the session and failed every call
/// in flight on it.)
#[tokio::test]
async fn a_panicking_progress_sink_does_not_end_the_session() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (go_tx, go) = tokio::sync::oneshot::channel();
    go_tx.send(()).unwrap();
    let server = tokio::spawn(progress_server(server_io, go));
    let surface = McpSurface::serve(tokio::io::split(client_io))
        .await
        .unwrap();
    let panicking =
        kberg_agent::ProgressSink::new(|r| panic!("a sink that fails at {}", r.progress));
    let out = surface
        .call_with_progress("index", json!({}), CancellationToken::new(), panicking)
        .await
        .expect("the call is answered");
    assert!(!out.is_error, "{out:?}");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = {
        let seen = std::sync::Arc::clone(&seen);
        kberg_agent::ProgressSink::new(move |r| seen.lock().unwrap().push(r.progress))
    };
    let out = surface
        .call_with_progress("index", json!({}), CancellationToken::new(), sink)
        .await
        .expect("the next call is answered");
    assert!(!out.is_error, "{out:?}");
    assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.5]);
    drop(surface);
    server.await.unwrap();
}

/// A stdio server that fails before it answers `initialize` (a missing module, a bad
/// argument) says why on its stderr: the connect error quotes its last lines, escaped and
/// bounded, instead of only "connection closed".
#[tokio::test]
async fn a_stdio_server_that_dies_at_start_is_quoted_from_its_stderr() {
    let mut command = tokio::process::Command::new("sh");
    command.args([
        "-c",
        "echo 'starting' >&2; printf 'Traceback...\\nModuleNotFoundError: No module named mcp_server_x \\033[2J\\n' >&2; exit 3",
    ]);
    let e = McpSurface::spawn(command).await.err().unwrap();
    assert_eq!(e.code(), "surface_connect");
    let said = e.to_string();
    assert!(
        said.contains("ModuleNotFoundError: No module named mcp_server_x"),
        "{said}"
    );
    assert!(said.contains("starting"), "{said}");
    assert!(
        !said.contains('\u{1b}'),
        "control characters are escaped: {said:?}"
    );

    // A server that writes a long line before it dies: the quote stays short, its end kept.
    let mut command = tokio::process::Command::new("sh");
    command.args([
        "-c",
        "head -c 20000 /dev/zero | tr '\\0' 'x' >&2; echo >&2; echo 'the last words' >&2; exit 1",
    ]);
    let e = McpSurface::spawn(command).await.err().unwrap();
    let said = e.to_string();
    assert!(
        said.contains("the last words"),
        "{}",
        &said[said.len().saturating_sub(200)..]
    );
    assert!(said.len() < 4_000, "{}", said.len());
}

/// A server that restarts (a deploy, a crash) forgets its sessions: while it is down a call
/// fails as the connection's failure, and once it is back the same surface serves again (a
/// new session), without the app connecting anew.
#[tokio::test]
async fn a_restarted_server_is_served_again_by_the_same_surface() {
    let app = || McpApp::builder("notes", "1.0.0").tools(registry()).build();
    let first = RunningServer::start(
        app(),
        loopback().auth(OpenAccess::as_principal(principal())),
    )
    .await;
    let addr = first.addr;
    let surface = McpSurface::connect_http(&first.url).await.unwrap();
    let call = || {
        surface.call(
            "add_note",
            json!({"title": "milk", "priority": 1}),
            CancellationToken::new(),
        )
    };
    let r = call().await.unwrap();
    assert!(!r.is_error, "{r:?}");

    first.stop();
    // The port is free once the server has let it go.
    let listener = kberg_testkit::eventually_async("the port to be free", || async move {
        std::net::TcpListener::bind(addr).ok()
    })
    .await;
    drop(listener);
    let down = call().await;
    assert!(
        down.is_err() || down.as_ref().is_ok_and(|r| r.is_error),
        "{down:?}"
    );

    let _second = RunningServer::start(
        app(),
        kberg_server::HttpConfig::new(addr).auth(OpenAccess::as_principal(principal())),
    )
    .await;
    let r = call().await.unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(
        surface
            .tools()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "add_note")
    );
}

/// MCP Apps: a tool whose `_meta.ui.visibility` leaves out `model` is for the app's view only,
/// and a host does not give it to the model. Both surfaces leave it out of the tools they list
/// (a call the model writes to it is then answered as a call to an unlisted tool, never sent),
/// and the app can still call it through the surface.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_for_the_apps_view_only_is_not_offered_to_the_model() {
    let tools = ToolRegistry::new();
    for (name, visibility) in [
        ("refresh", json!(["app"])),
        ("clock", json!(["model", "app"])),
        ("ask", json!(["model"])),
    ] {
        tools
            .register(
                ToolBuilder::new(name)
                    .meta(
                        "ui",
                        json!({"resourceUri": "ui://clock/app.html", "visibility": visibility}),
                    )
                    .sync_handler(move |_: Value, _| Ok(ToolOutput::text(name))),
            )
            .unwrap();
    }
    let (_server, surfaces) = in_process_and_over_http(tools).await;
    for surface in surfaces {
        let mut offered: Vec<String> = surface
            .tools()
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        offered.sort();
        assert_eq!(offered, ["ask", "clock"]);
        let r = surface
            .call("refresh", json!({}), CancellationToken::new())
            .await
            .unwrap();
        assert_eq!((r.is_error, r.text.as_str()), (false, "refresh"));
    }
}
