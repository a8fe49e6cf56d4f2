//! Forwarding beyond a plain call, against real upstreams: progress from server-everything's
//! long-running tool reaching an rmcp client through the aggregator served by kberg-server,
//! cancellation of a forwarded call, an upstream's `tools/list_changed` (a kberg-server upstream
//! whose tools change at runtime) updating the aggregated registry, and upstreams that hang or
//! speak garbage on stdio (contained as unavailable, never stalling the aggregator).

mod peers;

use kberg_testkit::serve::{RunningServer, loopback};

use peers::*;
use std::time::Duration;

use kberg_core::{
    CallOptions, CancellationToken, ErrorCode, Principal, ToolBuilder, ToolOutput, ToolRegistry,
};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Backoff, UpstreamConfig, UpstreamRuntime, UpstreamStatus,
    UpstreamThread, UpstreamTransport,
};
use kberg_server::{BearerTokens, McpApp};
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

/// Serves `tools` on 127.0.0.1 (free port) for bearer `token`; stops when the guard drops.
async fn serve(tools: ToolRegistry, token: &str, who: &str) -> (String, StopOnDrop) {
    let server = RunningServer::start(
        McpApp::builder("test", "1").tools(tools).build(),
        loopback().auth(BearerTokens::new().with_token(token, Principal::new(who))),
    )
    .await;
    let url = server.url.clone();
    let guard = server.into_guard();
    (url, guard)
}

#[derive(Clone)]
struct Progress(mpsc::UnboundedSender<f64>);

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.progress);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_progress_reaches_the_client() {
    let (agg, registry) = connected("ev", everything_stdio()).await;
    let (url, _guard) = serve(registry, "agent-token", "agent").await;

    let (tx, mut rx) = mpsc::unbounded_channel();
    let client = Progress(tx)
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).auth_header("agent-token"),
        ))
        .await
        .expect("client connects");
    let mut p = CallToolRequestParams::new("ev__trigger-long-running-operation");
    p.arguments = json!({"duration": 1, "steps": 3}).as_object().cloned();
    let r = client.call_tool(p).await.expect("call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let first = tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("progress forwarded")
        .expect("channel open");
    assert!(first >= 1.0, "{first}");
    let _ = client.cancel().await;
    agg.shutdown().await;
}

/// The annotations an upstream puts on its result's blocks (who each is for, its priority)
/// reach the client as the upstream sent them: a client that shows the user what is meant for
/// the user, and the model what is meant for the model, can do so through the aggregator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_content_annotations_reach_the_client() {
    let (agg, registry) = connected("ev", everything_stdio()).await;
    let (url, _guard) = serve(registry, "agent-token", "agent").await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).auth_header("agent-token"),
        ))
        .await
        .expect("client connects");
    let mut p = CallToolRequestParams::new("ev__get-annotated-message");
    p.arguments = json!({"messageType": "success", "includeImage": true})
        .as_object()
        .cloned();
    let r = client.call_tool(p).await.expect("call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let blocks = serde_json::to_value(&r.content).unwrap();
    assert_eq!(blocks[0]["text"], "Operation completed successfully");
    // rmcp holds a priority as an `f32`: 0.7 comes back as the nearest `f32`.
    let priority = |b: &serde_json::Value| b["annotations"]["priority"].as_f64().unwrap();
    assert_eq!(blocks[0]["annotations"]["audience"], json!(["user"]));
    assert!((priority(&blocks[0]) - 0.7).abs() < 1e-6, "{blocks}");
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["annotations"]["audience"], json!(["user"]));
    assert!((priority(&blocks[1]) - 0.5).abs() < 1e-6, "{blocks}");
    let _ = client.cancel().await;
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_forwarded_call_ends_and_the_upstream_stays_usable() {
    let (agg, registry) = connected("ev", everything_stdio()).await;
    let cancel = CancellationToken::new();
    let reg = registry.clone();
    let (opts, mut noted) = noted_options(cancel.clone());
    let call = tokio::spawn(async move {
        reg.call(
            &reader(),
            "ev__trigger-long-running-operation",
            json!({"duration": 120, "steps": 120}),
            opts,
        )
        .await
    });
    // The upstream's first progress report: the tool is running there, not still on its way.
    first_progress(&mut noted).await;
    cancel.cancel();
    let err = tokio::time::timeout(WAIT, call)
        .await
        .expect("the cancelled call ends")
        .expect("task")
        .expect_err("cancelled");
    assert_eq!(err.code(), ErrorCode::Cancelled);
    // Same connection, still usable.
    let out = registry
        .call(
            &reader(),
            "ev__echo",
            json!({"message": "after"}),
            CallOptions::default(),
        )
        .await
        .expect("echo");
    assert_eq!(out.all_text(), "Echo: after");
    assert_eq!(
        agg.status("ev"),
        Some(UpstreamStatus::Connected { generation: 1 })
    );
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tool_list_changes_update_the_registry() {
    let inner = ToolRegistry::new();
    inner
        .register(
            ToolBuilder::new("first").raw_handler(json!({"type": "object"}), |_a, _c| async {
                Ok(ToolOutput::text("one"))
            }),
        )
        .expect("register");
    let (url, _guard) = serve(inner.clone(), "upstream-secret", "aggregator").await;

    let registry = ToolRegistry::new();
    let mut changes = registry.changes();
    let agg = Aggregator::start(
        AggregatorConfig::new().upstream(UpstreamConfig::new(
            "app",
            UpstreamTransport::http(url).header("authorization", "Bearer upstream-secret"),
        )),
        registry.clone(),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("app", 1, WAIT).await,
        "{:?}",
        agg.status("app")
    );
    assert_eq!(agg.tools_of("app"), vec!["app__first".to_string()]);

    inner
        .register(
            ToolBuilder::new("second").raw_handler(json!({"type": "object"}), |_a, _c| async {
                Ok(ToolOutput::text("two"))
            }),
        )
        .expect("register");
    let appeared = tokio::time::timeout(WAIT, async {
        while registry.spec("app__second").is_none() {
            let _ = changes.changed().await;
        }
    })
    .await;
    assert!(
        appeared.is_ok(),
        "app__second never appeared: {:?}",
        agg.tools_of("app")
    );
    let out = registry
        .call(&reader(), "app__second", json!({}), CallOptions::default())
        .await
        .expect("call");
    assert_eq!(out.all_text(), "two");

    // A tool that changes upstream is replaced in one step: the registry's version moves once,
    // so no listing in between misses it.
    let before = *changes.borrow_and_update();
    inner
        .edit(|e| {
            e.remove("second");
            e.register(std::sync::Arc::new(
                ToolBuilder::new("second")
                    .description("Answer two, described")
                    .raw_handler(json!({"type": "object"}), |_a, _c| async {
                        Ok(ToolOutput::text("two"))
                    }),
            ))
        })
        .expect("replaced upstream");
    let replaced = tokio::time::timeout(WAIT, async {
        while registry.spec("app__second").map(|s| s.description)
            != Some("Answer two, described".into())
        {
            let _ = changes.changed().await;
        }
    })
    .await;
    assert!(replaced.is_ok(), "app__second was not replaced");
    assert_eq!(*changes.borrow_and_update(), before + 1, "one version step");

    assert!(inner.remove("first"));
    let gone = tokio::time::timeout(WAIT, async {
        while registry.spec("app__first").is_some() {
            let _ = changes.changed().await;
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "app__first was not removed: {:?}",
        agg.tools_of("app")
    );
    let err = registry
        .call(&reader(), "app__first", json!({}), CallOptions::default())
        .await
        .expect_err("removed");
    assert_eq!(err.code(), ErrorCode::UnknownTool);
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_and_garbage_upstreams_are_contained() {
    let node = node();
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new(
            "hangs",
            UpstreamTransport::stdio(node.clone()).arg("-e").arg("setInterval(() => {}, 1000)"),
        ))
        .upstream(UpstreamConfig::new(
            "garbage",
            UpstreamTransport::stdio(node)
                .arg("-e")
                .arg("process.stdout.write('this is not json-rpc\\n{\"jsonrpc\":7}\\n'); setInterval(() => {}, 1000)"),
        ))
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .connect_timeout(Duration::from_secs(2))
        .backoff(Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        });
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(c, registry.clone()).expect("valid");
    for ns in ["hangs", "garbage"] {
        let mut rx = agg.status_changes(ns).expect("known");
        let status = tokio::time::timeout(
            WAIT,
            rx.wait_for(|s| matches!(s, UpstreamStatus::Unavailable { .. })),
        )
        .await
        .expect("reported unavailable")
        .map(|s| s.clone())
        .expect("status");
        assert!(
            matches!(status, UpstreamStatus::Unavailable { .. }),
            "{ns}: {status:?}"
        );
        assert!(agg.tools_of(ns).is_empty());
    }
    // The healthy upstream is unaffected.
    assert!(agg.wait_connected("ev", 1, WAIT).await);
    let out = registry
        .call(
            &reader(),
            "ev__echo",
            json!({"message": "fine"}),
            CallOptions::default(),
        )
        .await
        .expect("echo");
    assert_eq!(out.all_text(), "Echo: fine");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_forwarded_call_cancels_it_upstream() {
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let (cancelled_tx, mut cancelled) = mpsc::unbounded_channel::<()>();
    let inner = ToolRegistry::new();
    inner
        .register(ToolBuilder::new("slow").raw_handler(
            json!({"type": "object"}),
            move |_a, ctx| {
                let started = started_tx.clone();
                let cancelled = cancelled_tx.clone();
                async move {
                    let _ = started.send(());
                    ctx.cancellation().cancelled().await;
                    let _ = cancelled.send(());
                    Ok(ToolOutput::text("stopped"))
                }
            },
        ))
        .expect("register");
    let (url, _guard) = serve(inner, "upstream-secret", "aggregator").await;
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(
        AggregatorConfig::new().upstream(UpstreamConfig::new(
            "app",
            UpstreamTransport::http(url).header("authorization", "Bearer upstream-secret"),
        )),
        registry.clone(),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("app", 1, WAIT).await,
        "{:?}",
        agg.status("app")
    );

    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let reg = registry.clone();
    let call = tokio::spawn(async move {
        reg.call(
            &reader(),
            "app__slow",
            json!({}),
            CallOptions::with_cancel(token),
        )
        .await
    });
    tokio::time::timeout(WAIT, started.recv())
        .await
        .expect("the upstream tool started")
        .expect("channel open");
    cancel.cancel();
    let err = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
        .expect("task")
        .expect_err("cancelled");
    assert_eq!(err.code(), ErrorCode::Cancelled);
    tokio::time::timeout(WAIT, cancelled.recv())
        .await
        .expect("the upstream saw notifications/cancelled")
        .expect("channel open");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_prompts_are_namespaced_and_forwarded() {
    let prompts = kberg_core::PromptRegistry::new();
    let agg = Aggregator::start_with_prompts(
        AggregatorConfig::new().upstream(UpstreamConfig::new("ev", everything_stdio())),
        ToolRegistry::new(),
        prompts.clone(),
    )
    .expect("valid");
    assert!(agg.wait_connected("ev", 1, WAIT).await);
    let names: Vec<String> = prompts.list().into_iter().map(|p| p.name).collect();
    assert!(
        names.contains(&"ev__args-prompt".to_string())
            && names.contains(&"ev__simple-prompt".to_string()),
        "{names:?}"
    );
    let spec = prompts
        .list()
        .into_iter()
        .find(|p| p.name == "ev__args-prompt")
        .expect("listed");
    assert!(
        spec.arguments
            .iter()
            .any(|a| a.name == "city" && a.required)
    );

    let mut args = std::collections::BTreeMap::new();
    args.insert("city".to_string(), "Paris".to_string());
    let r = prompts
        .get("ev__args-prompt", args)
        .await
        .expect("rendered");
    assert_eq!(r.messages.len(), 1);
    assert_eq!(r.messages[0].role, kberg_core::Role::User);
    assert_eq!(
        r.messages[0].content,
        kberg_core::Content::Text("What's weather in Paris?".into())
    );
    // The required argument is checked before anything is forwarded.
    let err = prompts
        .get("ev__args-prompt", std::collections::BTreeMap::new())
        .await
        .expect_err("city missing");
    assert!(
        matches!(err, kberg_core::PromptError::MissingArgument { .. }),
        "{err:?}"
    );
    agg.shutdown().await;
}

/// The calling client of a forwarded call: notes the thread each progress report reached it on
/// (its name, and its id from `/proc/thread-self`).
struct ThreadNoting(std::sync::Mutex<Vec<(Option<String>, std::path::PathBuf)>>);

#[async_trait::async_trait]
impl kberg_core::ClientPeer for ThreadNoting {
    async fn notify(
        &self,
        method: &str,
        _params: serde_json::Value,
    ) -> Result<(), kberg_core::PeerError> {
        if method == "notifications/progress" {
            let thread = std::thread::current().name().map(str::to_string);
            let id = std::fs::read_link("/proc/thread-self").unwrap_or_default();
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((thread, id));
        }
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        _params: serde_json::Value,
        _cancel: CancellationToken,
    ) -> Result<serde_json::Value, kberg_core::PeerError> {
        Err(kberg_core::PeerError::NotSupported(method.to_string()))
    }
    fn supports(&self, _capability: &str) -> bool {
        false
    }
}

/// Calls server-everything's long-running operation through `registry` and returns the
/// threads its progress reports reached the caller on.
async fn progress_threads(
    agg: &Aggregator,
    registry: &ToolRegistry,
) -> Vec<(Option<String>, std::path::PathBuf)> {
    assert!(
        agg.wait_connected("ev", 1, WAIT).await,
        "{:?}",
        agg.status("ev")
    );
    let peer = std::sync::Arc::new(ThreadNoting(std::sync::Mutex::default()));
    let opts = CallOptions::default()
        .with_peer(peer.clone())
        .with_progress_token(json!("p-1"));
    let out = registry
        .call(
            &reader(),
            "ev__trigger-long-running-operation",
            json!({"duration": 1, "steps": 2}),
            opts,
        )
        .await
        .expect("answered");
    assert!(!out.is_error, "{out:?}");
    let seen = peer
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(!seen.is_empty(), "no progress relayed");
    seen
}

/// Waits until the thread with this `/proc/thread-self` target has ended.
async fn thread_ends(id: &std::path::Path) {
    // The thread's entry in /proc goes once the thread has ended.
    let task = std::path::Path::new("/proc/self/task").join(id.file_name().expect("a thread id"));
    kberg_testkit::eventually_async("the upstream thread ends", || async {
        (!task.exists()).then_some(())
    })
    .await;
}

/// By default the upstream clients run on the aggregator's own thread, `kberg-upstreams`
/// (an upstream's progress is relayed from there), which ends once the aggregator is shut
/// down, or dropped; with `UpstreamRuntime::Caller` they run on the runtime that started it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_clients_run_where_the_configuration_says() {
    for (runtime, shut_down) in [
        (UpstreamRuntime::Own, true),
        (UpstreamRuntime::Own, false),
        (UpstreamRuntime::Caller, true),
    ] {
        let registry = ToolRegistry::new();
        let config = AggregatorConfig::new()
            .upstream(UpstreamConfig::new("ev", everything_stdio()))
            .runtime(runtime.clone());
        let agg = Aggregator::start(config, registry.clone()).expect("valid");
        assert_eq!(
            agg.upstream_thread().is_some(),
            runtime == UpstreamRuntime::Own
        );
        let seen = progress_threads(&agg, &registry).await;
        for (thread, _) in &seen {
            match runtime {
                UpstreamRuntime::Own => assert_eq!(thread.as_deref(), Some("kberg-upstreams")),
                _ => assert_ne!(thread.as_deref(), Some("kberg-upstreams")),
            }
        }
        if shut_down {
            agg.shutdown().await;
        } else {
            drop(agg);
        }
        if runtime == UpstreamRuntime::Own {
            thread_ends(&seen[0].1).await;
        }
    }
}

/// Aggregators handed one [`UpstreamThread`] run their upstream clients on that one thread,
/// which outlives them while its starter holds it (a later aggregator still runs on it) and
/// ends once the starter drops it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregators_handed_one_thread_share_it() {
    let thread = UpstreamThread::start("shared-upstreams").expect("a thread");
    assert_eq!(thread.name(), "shared-upstreams");
    let start = || {
        let registry = ToolRegistry::new();
        let config = AggregatorConfig::new()
            .upstream(UpstreamConfig::new("ev", everything_stdio()))
            .runtime(UpstreamRuntime::Thread(thread.clone()));
        let agg = Aggregator::start(config, registry.clone()).expect("valid");
        assert_eq!(agg.upstream_thread(), Some(&thread));
        (agg, registry)
    };
    let (first, first_registry) = start();
    let (second, second_registry) = start();
    let mut seen = progress_threads(&first, &first_registry).await;
    seen.extend(progress_threads(&second, &second_registry).await);
    let id = seen[0].1.clone();
    for (name, tid) in &seen {
        assert_eq!(name.as_deref(), Some("shared-upstreams"));
        assert_eq!(tid, &id, "every report comes from the one thread");
    }
    first.shutdown().await;
    drop(second);
    // Both aggregators are gone; the starter's handle keeps the thread for the next one.
    let (third, third_registry) = start();
    for (_, tid) in progress_threads(&third, &third_registry).await {
        assert_eq!(tid, id);
    }
    third.shutdown().await;
    assert!(
        std::path::Path::new("/proc/self/task")
            .join(id.file_name().expect("a thread id"))
            .exists(),
        "the thread runs while its starter holds it"
    );
    drop(thread);
    thread_ends(&id).await;
}
