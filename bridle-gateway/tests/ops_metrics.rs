//! Prometheus `/metrics` on the gateway's listener, scraped over real HTTP on loopback after real
//! MCP traffic: requests by method and generation (a stateful client and a raw 2026-07-28
//! request), tool calls by tool, outcome and agent with their latencies, live sessions, the
//! upstream's health and reconnects, the review queue's depth and the vault's operations.
//! Argument values, unknown tool names and tokens never appear in the exposition. The pending
//! proposals and scope tickets are counted without reading them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod ops_support;

use bridle_gateway::vault::SecretValue;
use bridle_rules::{AgentCatalog, ChangeRequest, Origin, RulesStore, Severity};
use kberg_agent::{McpSurface, ToolSurface};
use kberg_testkit::eventually_async_ok;
use ops_support::{bind, data_dir, poll_json, run, start_upstream, token};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const ARG_CANARY: &str = "arg-canary-7f3e";
const TOOL_CANARY: &str = "no_such_tool_canary_91c";

/// The value of one series (`name{labels}`) in an OpenMetrics text page.
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn scrape(http: &reqwest::Client, base: &str) -> String {
    let r = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    r.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_shows_in_the_exposition_without_argument_values() {
    let upstream = start_upstream().await;
    let tmp = data_dir(Some(&upstream.url), "");
    let bound = bind(tmp.path(), |b| b).await;
    bound
        .gateway()
        .vault()
        .create(
            "gitea-token",
            &SecretValue::new(b"vault-canary".to_vec()),
            "admin",
        )
        .unwrap();
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let http = reqwest::Client::new();

    let claude = McpSurface::connect_http_with_bearer(&gw.url, &token(tmp.path(), "claude"))
        .await
        .unwrap();
    let r = claude
        .call("tickets__whoami", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let r = claude
        .call(
            TOOL_CANARY,
            json!({"x": ARG_CANARY}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.is_error);
    let r = claude
        .call(
            "propose_guardrail",
            json!({"project": "demo", "id": "metrics-check", "statement": format!("Say {ARG_CANARY}."), "severity": "guidance"}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");

    // One raw 2026-07-28 call as codex (its read of a tool it may not see is refused).
    let codex_token = token(tmp.path(), "codex");
    let r = http
        .post(&gw.url)
        .bearer_auth(&codex_token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "tickets__whoami")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "tickets__whoami", "arguments": {"note": ARG_CANARY},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());

    let page = scrape(&http, &gw.base).await;
    let at_least = |series: &str, n: f64| {
        let v = value(&page, series).unwrap_or_else(|| panic!("no {series} in\n{page}"));
        assert!(v >= n, "{series} = {v}, expected at least {n}");
    };
    at_least(
        r#"bridle_mcp_requests_total{method="initialize",generation="stateful"}"#,
        1.0,
    );
    at_least(
        r#"bridle_mcp_requests_total{method="tools/call",generation="stateful"}"#,
        3.0,
    );
    at_least(
        r#"bridle_mcp_requests_total{method="tools/call",generation="stateless"}"#,
        1.0,
    );
    at_least(
        r#"bridle_mcp_request_duration_seconds_count{method="tools/call",generation="stateful"}"#,
        3.0,
    );
    at_least(
        r#"bridle_tool_calls_total{tool="tickets__whoami",outcome="ok",agent="claude"}"#,
        1.0,
    );
    at_least(
        r#"bridle_tool_calls_total{tool="unknown",outcome="unknown_tool",agent="claude"}"#,
        1.0,
    );
    at_least(
        r#"bridle_tool_calls_total{tool="propose_guardrail",outcome="ok",agent="claude"}"#,
        1.0,
    );
    assert!(
        page.lines().any(
            |l| l.starts_with("bridle_tool_calls_total{tool=\"tickets__whoami\"")
                && l.contains("agent=\"codex\"")
        ),
        "codex's call is counted:\n{page}"
    );
    at_least(
        r#"bridle_tool_call_duration_seconds_count{tool="tickets__whoami"}"#,
        1.0,
    );
    at_least(r#"bridle_sessions{generation="stateful"}"#, 1.0);
    at_least(r#"bridle_sessions{generation="stateless"}"#, 1.0);
    assert_eq!(
        value(&page, r#"bridle_upstream_up{namespace="tickets"}"#),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(
            &page,
            r#"bridle_upstream_reconnects_total{namespace="tickets"}"#
        ),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "bridle_review_queue_depth"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "bridle_scope_tickets_pending"),
        Some(0.0),
        "{page}"
    );
    at_least(r#"bridle_vault_operations_total{action="create"}"#, 1.0);
    assert!(page.ends_with("# EOF\n"));

    for leak in [
        ARG_CANARY,
        TOOL_CANARY,
        "vault-canary",
        &codex_token,
        &token(tmp.path(), "claude"),
    ] {
        assert!(!page.contains(leak), "`{leak}` reached /metrics");
    }

    // The upstream goes away and comes back on the same port, which the test keeps meanwhile:
    // one reconnect, counted.
    let kept = ops_support::ReservedPort::beside(&upstream);
    upstream.stop.cancel();
    let _ = upstream.served.await;
    // The aggregator notices when a call fails.
    let r = claude
        .call("tickets__whoami", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(r.is_error, "{r:?}");
    let again = ops_support::start_upstream_on(kept).await;
    let (_, _) = poll_json(&http, &format!("{}/readyz", gw.base), |s, _| s == 200).await;
    eventually_async_ok("a reconnect to be counted", || async {
        let page = scrape(&http, &gw.base).await;
        let n = value(
            &page,
            r#"bridle_upstream_reconnects_total{namespace="tickets"}"#,
        );
        if n == Some(1.0) {
            Ok(())
        } else {
            Err(format!("\n{page}"))
        }
    })
    .await;

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    again.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_requests_get_bounded_labels() {
    let tmp = data_dir(None, "");
    let gw = run(bind(tmp.path(), |b| b).await);
    let http = reqwest::Client::new();
    let t = token(tmp.path(), "claude");
    // A made-up method, a body that is not JSON, and a response-shaped message: each counted
    // under a fixed label, none under what the client wrote.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"made/up-method-canary"}"#,
        "{not json",
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
    ] {
        let _ = http
            .post(&gw.url)
            .bearer_auth(&t)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await
            .unwrap();
    }
    let page = scrape(&http, &gw.base).await;
    assert!(!page.contains("made/up-method-canary"), "{page}");
    for label in ["other", "invalid", "response"] {
        let series =
            format!(r#"bridle_mcp_requests_total{{method="{label}",generation="stateful"}}"#);
        assert_eq!(value(&page, &series), Some(1.0), "{series}\n{page}");
    }
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}

/// The review queue's depth and the pending scope tickets are counted, not loaded: a pending
/// proposal whose stored change this build cannot read (one a newer build wrote) still counts,
/// and neither series leaves the exposition because of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_items_are_counted_without_reading_them() {
    let tmp = data_dir(None, "");
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    let origin = Origin::agent("claude", None);
    let mut ids = Vec::new();
    for id in ["count-me", "count-me-too"] {
        let change = ChangeRequest::Guardrail {
            id: id.into(),
            statement: format!("Statement {id}."),
            severity: Severity::Guidance,
            applies_to: vec!["all_agents".into()],
        };
        ids.push(store.propose("demo", &origin, &change, None).unwrap().id);
    }
    store
        .request_scope(
            "demo",
            "claude",
            None,
            "Rename a module",
            "the task needs it",
        )
        .unwrap();
    let db = rusqlite::Connection::open(tmp.path().join("bridle.db")).unwrap();
    let changed = db
        .execute(
            r#"UPDATE proposals SET change = '{"kind":"from_a_newer_build"}' WHERE id = ?1"#,
            [i64::try_from(ids[0]).unwrap()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    assert_eq!(
        store.queue(None, false).unwrap().len(),
        1,
        "the listing leaves the unreadable one out"
    );

    let gw = run(bind(tmp.path(), |b| b).await);
    let http = reqwest::Client::new();
    let page = scrape(&http, &gw.base).await;
    assert_eq!(
        value(&page, "bridle_review_queue_depth"),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "bridle_scope_tickets_pending"),
        Some(1.0),
        "{page}"
    );
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}
