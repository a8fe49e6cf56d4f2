//! The aggregator's `ForwardHook` over real HTTP: a forwarded tool call carries exactly the
//! `_meta` keys its hook returns (`CarryMeta` copies the named keys of the caller's `_meta` and
//! nothing else), runs inside the hook's span, and the hook learns how it ended: answered, a tool
//! error with its code, or the aggregator's own code when the upstream is gone. Without a hook
//! nothing of the caller's `_meta` is sent. A tool error's code that quotes the upstream's
//! credential reaches the hook with the credential redacted, as everything else the upstream says,
//! also a form of it the aggregator cannot tell from an HTTP upstream's headers when the app
//! names it with `UpstreamConfig::stderr_redact`; so does the report of a tool the aggregator
//! skips (`Aggregator::skipped`).

mod peers;

use peers::*;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use kberg_core::{CallOptions, Caller, Principal, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, CarryMeta, Forward, ForwardHook, ForwardOutcome, OutgoingCall,
    UpstreamConfig, UpstreamTransport,
};
use kberg_server::{HttpConfig, HttpServer, McpApp, OpenAccess};
use serde_json::{Map, Value, json};

/// The credential the aggregator sends its upstream, which the upstream's `leak` tool quotes.
const CANARY: &str = "canary-3d9b7e21c4a05f68";

/// A Kberg upstream whose `meta` tool answers the `_meta` it received, whose `fail` tool
/// answers an error result with a code, and whose `leak` tool answers an error result whose
/// code quotes [`CANARY`] (as a server that puts its backend's rejection into a code might).
async fn upstream() -> (String, StopOnDrop, tokio::task::JoinHandle<()>) {
    let tools = ToolRegistry::new();
    tools
        .register(ToolBuilder::new("meta").raw_handler(
            json!({"type": "object"}),
            |_a, ctx| async move {
                Ok(ToolOutput::text("meta")
                    .with_structured(json!({"meta": ctx.meta().cloned().unwrap_or(Value::Null)})))
            },
        ))
        .expect("register");
    tools
        .register(
            ToolBuilder::new("fail")
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async move {
                    Ok(ToolOutput::error_with("no", json!({"code": "not_today"})))
                }),
        )
        .expect("register");
    tools
        .register(ToolBuilder::new("leak").raw_handler(
            json!({"type": "object"}),
            |_a, _ctx| async move {
                Ok(ToolOutput::error_with(
                    "no",
                    json!({"code": format!("bad_token:{CANARY}")}),
                ))
            },
        ))
        .expect("register");
    let server = HttpServer::bind(
        McpApp::builder("upstream", "1").tools(tools).build(),
        HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
            .auth(OpenAccess::as_principal(Principal::new("aggregator"))),
    )
    .await
    .expect("bind upstream");
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = StopOnDrop(server.shutdown_token());
    let served = tokio::spawn(async move {
        let _ = server.run(std::future::pending()).await;
    });
    (url, stop, served)
}

/// Carries `traceparent`, adds a key of its own, and records what it is told.
#[derive(Default)]
struct Recording {
    calls: Mutex<Vec<String>>,
    outcomes: Mutex<Vec<String>>,
}

impl ForwardHook for Recording {
    fn outgoing(&self, call: &OutgoingCall<'_>, meta: &mut Map<String, Value>) -> tracing::Span {
        self.calls
            .lock()
            .expect("lock")
            .push(format!("{} {} {}", call.namespace, call.method, call.tool));
        CarryMeta::keys(["traceparent"]).outgoing(call, meta);
        meta.insert("x-added".into(), json!("by-hook"));
        tracing::info_span!("forwarded")
    }

    fn finished(&self, _span: &tracing::Span, outcome: ForwardOutcome<'_>) {
        self.outcomes
            .lock()
            .expect("lock")
            .push(format!("{outcome:?}"));
    }
}

fn options(meta: Value) -> CallOptions {
    CallOptions::default().with_meta(meta)
}

fn caller() -> Caller {
    Caller::new(Principal::new("agent"))
}

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_decides_what_a_forwarded_call_carries_and_learns_how_it_ended() {
    let (url, stop, served) = upstream().await;
    let registry = ToolRegistry::new();
    let hook = Arc::new(Recording::default());
    let config =
        AggregatorConfig::new().upstream(UpstreamConfig::new("up", UpstreamTransport::http(url)));
    let agg = Aggregator::start_with(
        config,
        registry.clone(),
        Forward::new().hook(Arc::clone(&hook) as Arc<dyn ForwardHook>),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );

    let out = registry
        .call(
            &caller(),
            "up__meta",
            json!({}),
            options(json!({"traceparent": TP, "secret": "not-for-upstreams"})),
        )
        .await
        .expect("call");
    let seen = &out.structured.as_ref().expect("structured")["meta"];
    assert_eq!(seen["traceparent"], json!(TP), "{seen}");
    assert_eq!(seen["x-added"], json!("by-hook"), "{seen}");
    assert!(seen.get("secret").is_none(), "{seen}");

    let out = registry
        .call(&caller(), "up__fail", json!({}), options(json!({})))
        .await
        .expect("call");
    assert!(out.is_error);

    // The upstream goes away: the call answers the aggregator's code, and the hook learns it.
    drop(stop);
    tokio::time::timeout(WAIT, served)
        .await
        .expect("the upstream stops")
        .expect("served");
    let out = registry
        .call(&caller(), "up__meta", json!({}), options(json!({})))
        .await
        .expect("call");
    assert!(out.is_error);

    assert_eq!(
        *hook.calls.lock().expect("lock"),
        [
            "up tools/call meta",
            "up tools/call fail",
            "up tools/call meta"
        ]
    );
    assert_eq!(
        *hook.outcomes.lock().expect("lock"),
        [
            "Answered".to_string(),
            r#"ToolError { code: Some("not_today") }"#.to_string(),
            r#"Failed { code: "upstream_unavailable" }"#.to_string(),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_hook_the_callers_meta_stays_behind() {
    let (url, _stop, _served) = upstream().await;
    let registry = ToolRegistry::new();
    let config =
        AggregatorConfig::new().upstream(UpstreamConfig::new("up", UpstreamTransport::http(url)));
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(agg.wait_connected("up", 1, WAIT).await);
    let out = registry
        .call(
            &caller(),
            "up__meta",
            json!({}),
            options(json!({"traceparent": TP})),
        )
        .await
        .expect("call");
    let seen = &out.structured.as_ref().expect("structured")["meta"];
    assert!(seen.get("traceparent").is_none(), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_code_quoting_the_credential_reaches_the_hook_redacted() {
    let (url, _stop, _served) = upstream().await;
    let registry = ToolRegistry::new();
    let hook = Arc::new(Recording::default());
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "up",
        UpstreamTransport::http(url).header("authorization", format!("Bearer {CANARY}")),
    ));
    let agg = Aggregator::start_with(
        config,
        registry.clone(),
        Forward::new().hook(Arc::clone(&hook) as Arc<dyn ForwardHook>),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    let out = registry
        .call(&caller(), "up__leak", json!({}), options(json!({})))
        .await
        .expect("call");
    assert!(out.is_error);
    assert_eq!(
        *hook.outcomes.lock().expect("lock"),
        [r#"ToolError { code: Some("bad_token:[redacted]") }"#.to_string()]
    );
}

/// A header that glues the credential to other text (`key-<token>`) is one word: the aggregator
/// hides it whole, and the bare token only when the app names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_form_of_an_http_credential_is_redacted_from_the_code_too() {
    let (url, _stop, _served) = upstream().await;
    let registry = ToolRegistry::new();
    let hook = Arc::new(Recording::default());
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new(
            "up",
            UpstreamTransport::http(url).header("x-api-key", format!("key-{CANARY}")),
        )
        .stderr_redact([CANARY.to_string()]),
    );
    let agg = Aggregator::start_with(
        config,
        registry.clone(),
        Forward::new().hook(Arc::clone(&hook) as Arc<dyn ForwardHook>),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    let out = registry
        .call(&caller(), "up__leak", json!({}), options(json!({})))
        .await
        .expect("call");
    assert!(out.is_error);
    assert_eq!(
        *hook.outcomes.lock().expect("lock"),
        [r#"ToolError { code: Some("bad_token:[redacted]") }"#.to_string()]
    );
}

/// A tool the aggregator skips is reported (`Aggregator::skipped`) by the upstream's name and
/// the reason, both the upstream's text: with the upstream's credential redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_tool_is_reported_without_the_credential() {
    let tools = ToolRegistry::new();
    // Valid upstream, too long once namespaced.
    let long = format!("{CANARY}_{}", "x".repeat(103));
    tools
        .register(
            ToolBuilder::new(long).raw_handler(json!({"type": "object"}), |_a, _ctx| async move {
                Ok(ToolOutput::text("ok"))
            }),
        )
        .expect("register");
    let server = HttpServer::bind(
        McpApp::builder("upstream", "1").tools(tools).build(),
        HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
            .auth(OpenAccess::as_principal(Principal::new("aggregator"))),
    )
    .await
    .expect("bind upstream");
    let url = format!("http://{}/mcp", server.local_addr());
    let _stop = StopOnDrop(server.shutdown_token());
    let _served = tokio::spawn(async move {
        let _ = server.run(std::future::pending()).await;
    });
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "up",
        UpstreamTransport::http(url).header("authorization", format!("Bearer {CANARY}")),
    ));
    let agg = Aggregator::start(config, ToolRegistry::new()).expect("valid");
    assert!(agg.wait_connected("up", 1, WAIT).await);
    let skipped = agg.skipped("up");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let shown = format!("{skipped:?}");
    assert!(!shown.contains(CANARY), "{shown}");
    assert!(shown.contains("[redacted]_xxx"), "{shown}");
}
