//! The sidecar aggregator against real MCP servers nobody here wrote:
//! `@modelcontextprotocol/server-everything` (over stdio and over Streamable HTTP) and
//! `@modelcontextprotocol/server-filesystem` (stdio, one temp directory allowed), both pinned and
//! installed by `scripts/install-tools.sh`. Covered: namespaced listing, forwarded calls (text
//! and a real file read), the gate refusing a write tool for lack of the capability assigned by
//! pattern, an upstream killed mid-call (clear `upstream_unavailable` error, the other upstream
//! unaffected, recovery after the reconnect), namespace tricks refused, credentials injected as
//! headers, and the aggregator's registry served by kberg-server to rmcp's client.

mod peers;

use kberg_testkit::serve::{RunningServer, loopback};

use peers::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kberg_core::{
    CallOptions, Caller, CancellationToken, ErrorCode, Grants, Principal, ToolBuilder, ToolOutput,
    ToolRegistry, WriteCapability,
};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Backoff, UPSTREAM_UNAVAILABLE, UpstreamConfig, UpstreamStatus,
    UpstreamTransport,
};
use kberg_server::{BearerTokens, McpApp};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

fn filesystem(dir: &TempDir) -> UpstreamTransport {
    UpstreamTransport::stdio(node())
        .arg(package("server-filesystem"))
        .arg(dir.0.to_string_lossy())
}

/// A fresh directory under the system temp dir, removed when dropped (also on failure).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "kberg-aggregate-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        // The filesystem server compares real paths.
        Self(std::fs::canonicalize(&p).expect("canonical temp dir"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fs_write() -> WriteCapability {
    WriteCapability::new("fs.write", "Change files")
}

fn config(dir: &TempDir) -> AggregatorConfig {
    AggregatorConfig::new()
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .upstream(UpstreamConfig::new("fs", filesystem(dir)))
        .write_rule("fs__write_*", fs_write())
        .write_rule("fs__edit_*", fs_write())
        .write_rule("fs__move_*", fs_write())
        .write_rule("fs__create_*", fs_write())
        .backoff(Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        })
}

async fn started(config: AggregatorConfig, registry: ToolRegistry) -> Aggregator {
    let agg = Aggregator::start(config, registry).expect("valid config");
    for ns in ["ev", "fs"] {
        if agg.status(ns).is_some() {
            assert!(
                agg.wait_connected(ns, 1, WAIT).await,
                "upstream {ns} did not connect: {:?}",
                agg.status(ns)
            );
        }
    }
    agg
}

fn writer() -> Caller {
    Caller::new(Principal::new("writer").with_grants(Grants::of(["fs.write"])))
}

async fn call(reg: &ToolRegistry, who: &Caller, name: &str, args: Value) -> ToolOutput {
    reg.call(who, name, args, CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{name} refused: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_upstreams_listed_namespaced_called_and_gated() {
    let dir = TempDir::new();
    let registry = ToolRegistry::new();
    let agg = started(config(&dir), registry.clone()).await;

    let names: Vec<String> = registry
        .list(&reader())
        .into_iter()
        .map(|s| s.name)
        .collect();
    for want in [
        "ev__echo",
        "ev__get-sum",
        "fs__read_text_file",
        "fs__list_allowed_directories",
    ] {
        assert!(
            names.contains(&want.to_string()),
            "{want} missing from {names:?}"
        );
    }
    let writer_names: Vec<String> = registry
        .list(&writer())
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(writer_names.contains(&"fs__write_file".to_string()));
    for n in agg.tools_of("ev") {
        assert!(n.starts_with("ev__"), "{n}");
    }
    let spec = registry.spec("fs__write_file").expect("registered");
    assert_eq!(spec.kind.capability(), Some("fs.write"));
    assert_eq!(
        registry
            .spec("fs__read_text_file")
            .map(|s| s.kind.capability().is_none()),
        Some(true)
    );

    let out = call(
        &registry,
        &reader(),
        "ev__echo",
        json!({"message": "hello"}),
    )
    .await;
    assert!(!out.is_error);
    assert_eq!(out.all_text(), "Echo: hello");

    // structuredContent passes through.
    let out = call(
        &registry,
        &reader(),
        "ev__get-structured-content",
        json!({"location": "New York"}),
    )
    .await;
    assert!(out.structured.is_some(), "{out:?}");

    let file = dir.0.join("note.txt");
    std::fs::write(&file, "from the test").expect("write fixture");
    let out = call(
        &registry,
        &reader(),
        "fs__read_text_file",
        json!({"path": file.to_string_lossy()}),
    )
    .await;
    assert_eq!(out.all_text(), "from the test");

    // An upstream error result keeps its isError flag.
    let out = call(
        &registry,
        &reader(),
        "fs__read_text_file",
        json!({"path": "/etc/passwd"}),
    )
    .await;
    assert!(out.is_error, "{out:?}");

    // The gate refuses the write for a reader and nothing is written.
    let target = dir.0.join("written.txt");
    let err = registry
        .call(
            &reader(),
            "fs__write_file",
            json!({"path": target.to_string_lossy(), "content": "x"}),
            CallOptions::default(),
        )
        .await
        .expect_err("reader may not write");
    assert_eq!(err.code(), ErrorCode::CapabilityRequired);
    assert!(!target.exists());

    // Granted, it runs upstream.
    let out = call(
        &registry,
        &writer(),
        "fs__write_file",
        json!({"path": target.to_string_lossy(), "content": "x"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(std::fs::read_to_string(&target).expect("written"), "x");

    // Arguments failing the upstream's schema are refused by the gate before forwarding.
    let err = registry
        .call(
            &reader(),
            "ev__echo",
            json!({"message": 5}),
            CallOptions::default(),
        )
        .await
        .expect_err("bad arguments");
    assert_eq!(err.code(), ErrorCode::InvalidArguments);
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_upstream_answers_unavailable_others_work_and_it_recovers() {
    let dir = TempDir::new();
    let registry = ToolRegistry::new();
    let agg = started(config(&dir), registry.clone()).await;
    let pid = agg.upstream_pid("ev").expect("child pid");

    let reg = registry.clone();
    let (opts, mut noted) = noted_options(CancellationToken::new());
    let long = tokio::spawn(async move {
        reg.call(
            &reader(),
            "ev__trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
            opts,
        )
        .await
    });
    // The upstream's first progress report: the call is running there when the upstream dies.
    first_progress(&mut noted).await;
    let killed = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(killed.success());

    let out = tokio::time::timeout(WAIT, long)
        .await
        .expect("the call ends once its upstream died")
        .expect("task")
        .expect("an error result, not a gate refusal");
    assert!(out.is_error);
    assert_eq!(
        out.structured.as_ref().and_then(|s| s.get("code")),
        Some(&json!(UPSTREAM_UNAVAILABLE)),
        "{out:?}"
    );
    assert!(out.all_text().contains("unavailable"), "{}", out.all_text());

    // The other upstream keeps working meanwhile.
    let out = call(
        &registry,
        &reader(),
        "fs__list_allowed_directories",
        json!({}),
    )
    .await;
    assert!(
        out.all_text().contains(&*dir.0.to_string_lossy()),
        "{}",
        out.all_text()
    );

    // The tools stay listed while the upstream is away, and it comes back as a new process.
    assert!(registry.spec("ev__echo").is_some());
    assert!(
        agg.wait_connected("ev", 2, WAIT).await,
        "{:?}",
        agg.status("ev")
    );
    assert_ne!(agg.upstream_pid("ev"), Some(pid));
    let out = call(&registry, &reader(), "ev__echo", json!({"message": "back"})).await;
    assert_eq!(out.all_text(), "Echo: back");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_tricks_are_refused() {
    // Separator injection and prefix tricks are refused before anything starts.
    for (ns, sep) in [
        ("ev__fs", "__"),
        ("ev_", "__"),
        ("e.v", "."),
        ("", "__"),
        ("a/b", "__"),
    ] {
        let c = AggregatorConfig::new()
            .separator(sep)
            .upstream(UpstreamConfig::new(ns, everything_stdio()));
        let err = Aggregator::start(c, ToolRegistry::new()).expect_err(ns);
        assert_eq!(err.code(), "invalid_namespace", "{ns}");
    }
    let c = AggregatorConfig::new().separator("::");
    assert_eq!(
        Aggregator::start(c, ToolRegistry::new())
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("invalid_separator")
    );
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .upstream(UpstreamConfig::new("ev", everything_stdio()));
    assert_eq!(
        Aggregator::start(c, ToolRegistry::new())
            .map(|_| ())
            .map_err(|e| e.code()),
        Err("duplicate_namespace")
    );

    // An upstream tool whose namespaced name is already taken (here by the app's own tool) is
    // skipped, and the app's tool keeps answering.
    let registry = ToolRegistry::new();
    registry
        .register(
            ToolBuilder::new("ev__echo").raw_handler(json!({"type": "object"}), |_a, _c| async {
                Ok(ToolOutput::text("the app's own echo"))
            }),
        )
        .expect("register");
    let c = AggregatorConfig::new().upstream(UpstreamConfig::new("ev", everything_stdio()));
    let agg = Aggregator::start(c, registry.clone()).expect("valid");
    assert!(agg.wait_connected("ev", 1, WAIT).await);
    let skipped = agg.skipped("ev");
    assert!(
        skipped
            .iter()
            .any(|(t, why)| t == "echo" && why.contains("already taken")),
        "{skipped:?}"
    );
    let out = call(&registry, &reader(), "ev__echo", json!({"message": "x"})).await;
    assert_eq!(out.all_text(), "the app's own echo");
    // A custom separator works the same way.
    agg.shutdown().await;
    let c = AggregatorConfig::new()
        .separator(".")
        .upstream(UpstreamConfig::new("ev", everything_stdio()));
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(c, registry.clone()).expect("valid");
    assert!(agg.wait_connected("ev", 1, WAIT).await);
    let out = call(&registry, &reader(), "ev.echo", json!({"message": "dot"})).await;
    assert_eq!(out.all_text(), "Echo: dot");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstream_is_unavailable_not_fatal() {
    // Nothing listens on this port (and no server of another test is given it meanwhile).
    let port = kberg_testkit::closed_port();
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new(
            "gone",
            // Credentials in the URL and a header: the reason shown names neither.
            UpstreamTransport::http(format!(
                "http://bot:s3cret-user@127.0.0.1:{port}/mcp?api_key=s3cret-query"
            ))
            .header("authorization", "Bearer s3cret-header"),
        ))
        .upstream(UpstreamConfig::new(
            "missing",
            UpstreamTransport::stdio("/nonexistent/kberg-no-such-server"),
        ))
        .backoff(Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(200),
        });
    let agg = Aggregator::start(c, ToolRegistry::new()).expect("valid");
    for ns in ["gone", "missing"] {
        let mut rx = agg.status_changes(ns).expect("known");
        let seen = tokio::time::timeout(
            WAIT,
            rx.wait_for(|s| matches!(s, UpstreamStatus::Unavailable { .. })),
        )
        .await
        .expect("reported unavailable")
        .map(|s| s.clone())
        .expect("status");
        let UpstreamStatus::Unavailable { reason } = &seen else {
            unreachable!("waited for Unavailable")
        };
        assert!(!reason.contains("s3cret"), "{reason}");
        if ns == "gone" {
            assert!(
                reason.contains(&format!("127.0.0.1:{port}/mcp")),
                "{reason}"
            );
        }
        assert!(agg.tools_of(ns).is_empty());
    }
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_upstreams_with_injected_credentials_served_to_an_mcp_client() {
    // Upstream 1: server-everything over Streamable HTTP.
    let everything = HttpEverything::start().await;
    // Upstream 2: a Kberg server that only admits a bearer token the aggregator injects.
    let inner_tools = ToolRegistry::new();
    inner_tools
        .register(
            ToolBuilder::new("whoami")
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    Ok(ToolOutput::text(ctx.caller().principal().id.clone()))
                }),
        )
        .expect("register");
    let inner = RunningServer::start(
        McpApp::builder("inner", "1").tools(inner_tools).build(),
        loopback()
            .auth(BearerTokens::new().with_token("upstream-secret", Principal::new("aggregator"))),
    )
    .await;
    let inner_url = inner.url.clone();

    let registry = ToolRegistry::new();
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new(
            "ev",
            UpstreamTransport::http(everything.url.clone()),
        ))
        .upstream(UpstreamConfig::new(
            "inner",
            UpstreamTransport::http(inner_url.clone())
                .header("authorization", "Bearer upstream-secret"),
        ));
    let agg = Aggregator::start(c, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("ev", 1, WAIT).await,
        "{:?}",
        agg.status("ev")
    );
    assert!(
        agg.wait_connected("inner", 1, WAIT).await,
        "{:?}",
        agg.status("inner")
    );

    // Without the header the same upstream is refused.
    let c = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "inner",
        UpstreamTransport::http(inner_url.clone()),
    ));
    let bare = Aggregator::start(c, ToolRegistry::new()).expect("valid");
    let mut rx = bare.status_changes("inner").expect("known");
    tokio::time::timeout(
        WAIT,
        rx.wait_for(|s| matches!(s, UpstreamStatus::Unavailable { .. })),
    )
    .await
    .expect("refused without credentials")
    .expect("status");
    drop(rx);
    bare.shutdown().await;

    // A credential that cannot be sent as a header (a pasted token with its line break) is
    // refused when the aggregator starts, naming the header and not the value, rather than
    // calling without it.
    let c = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "inner",
        UpstreamTransport::http(inner_url.clone())
            .header("authorization", "Bearer upstream-secret\n"),
    ));
    let refused = Aggregator::start(c, ToolRegistry::new())
        .expect_err("a header value with a line break")
        .to_string();
    assert!(refused.contains("`authorization`"), "{refused}");
    assert!(!refused.contains("upstream-secret"), "{refused}");

    // The aggregator's registry served by kberg-server, called from rmcp's client.
    let outer = RunningServer::start(
        McpApp::builder("aggregate", "1").tools(registry).build(),
        loopback().auth(BearerTokens::new().with_token("agent-token", Principal::new("agent"))),
    )
    .await;
    let outer_url = outer.url.clone();
    let _stop_outer = outer.into_guard();

    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(outer_url).auth_header("agent-token"),
        ))
        .await
        .expect("client connects");
    let tools = client.list_all_tools().await.expect("list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"ev__echo") && names.contains(&"inner__whoami"),
        "{names:?}"
    );
    let listing = serde_json::to_string(&tools).expect("json");
    assert!(!listing.contains("upstream-secret"));

    let mut p = CallToolRequestParams::new("ev__echo");
    p.arguments = json!({"message": "through"}).as_object().cloned();
    let r = client.call_tool(p).await.expect("call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(
        r.content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.as_str()),
        Some("Echo: through")
    );

    // The upstream saw the aggregator's credentials, not the agent's.
    let r = client
        .call_tool(CallToolRequestParams::new("inner__whoami"))
        .await
        .expect("call");
    assert_eq!(
        r.content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.as_str()),
        Some("aggregator")
    );
    let _ = client.cancel().await;
    agg.shutdown().await;
}
