//! Forwarded resources against real MCP servers nobody here wrote.
//!
//! `@modelcontextprotocol/server-everything` (stdio and Streamable HTTP) offers static document
//! resources (`demo://resource/static/document/<file>`), two URI templates
//! (`demo://resource/dynamic/{text,blob}/{resourceId}`) and `resources.subscribe`; once its tool
//! `toggle-subscriber-updates` is called it sends `notifications/resources/updated` for every
//! subscribed URI at once and then every 5 seconds (fixed in its source, no option to change it).
//! `@modelcontextprotocol/server-filesystem` offers no resources at all (no `resources`
//! capability; it returns file contents only as tool results), which the tests check.
//!
//! Covered: namespaced listing of resources and templates (`<ns>+<uri>`) from both transports,
//! reads of text and blob contents through kberg-server by rmcp's client, refusals of URIs of an
//! unknown upstream, without the prefix and with prefix-injection tricks (`-32002`), relayed
//! subscriptions reaching exactly the subscribed client, unsubscription stopping them,
//! re-subscription after the upstream was killed and reconnected (with an update announced for
//! what may have changed meanwhile), a dead upstream's resources
//! answering `upstream_unavailable` while others keep working, and the misbehaving stdio upstream
//! (`aggregate_raw_upstream.py`) whose resource reads hang or answer garbage.

mod peers;

use kberg_testkit::serve::{RunningServer, loopback};
use kberg_testkit::{eventually_async, eventually_async_ok};

use peers::*;
use std::time::Duration;

use base64::Engine as _;
use kberg_core::{
    CallOptions, Principal, ResourceBody, ResourceError, ResourceRegistry, ToolRegistry,
};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Backoff, Forward, UPSTREAM_INVALID_RESULT, UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE, UpstreamConfig, UpstreamTransport,
};
use kberg_server::{BearerTokens, McpApp};
use rmcp::model::{
    CallToolRequestParams, ErrorCode, ReadResourceRequestParams, ResourceContents,
    ResourceUpdatedNotificationParam, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

const DOC: &str = "demo://resource/static/document/architecture.md";
const OTHER_DOC: &str = "demo://resource/static/document/features.md";

fn backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
    }
}

/// Serves the aggregator's registries with kberg-server on 127.0.0.1 (free port).
async fn serve(tools: ToolRegistry, resources: ResourceRegistry) -> (String, StopOnDrop) {
    let server = RunningServer::start(
        McpApp::builder("aggregate", "1")
            .tools(tools)
            .resources(resources)
            .build(),
        loopback().auth(BearerTokens::new().with_token("agent-token", Principal::new("agent"))),
    )
    .await;
    let url = server.url.clone();
    let guard = server.into_guard();
    (url, guard)
}

/// An rmcp client that reports every `notifications/resources/updated` it receives.
#[derive(Clone)]
struct Watcher(mpsc::UnboundedSender<String>);

impl ClientHandler for Watcher {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

async fn client(
    url: &str,
) -> (
    RunningService<RoleClient, Watcher>,
    mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let c = Watcher(tx)
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.to_string())
                .auth_header("agent-token"),
        ))
        .await
        .expect("client connects");
    (c, rx)
}

/// Polls `check` (with the shared deadline) until it holds, without blocking a worker thread.
async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    eventually_async(what, || {
        let held = check().then_some(());
        async move { held }
    })
    .await;
}

fn mcp_code(e: &ServiceError) -> Option<ErrorCode> {
    match e {
        ServiceError::McpError(e) => Some(e.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_from_stdio_and_http_upstreams_listed_and_read_by_an_mcp_client() {
    let everything = HttpEverything::start().await;
    let fs_dir = std::env::temp_dir().join(format!("kberg-aggregate-res-{}", std::process::id()));
    std::fs::create_dir_all(&fs_dir).expect("temp dir");
    let fs_dir = std::fs::canonicalize(&fs_dir).expect("canonical");
    let tools = ToolRegistry::new();
    let resources = ResourceRegistry::new();
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .upstream(UpstreamConfig::new(
            "evh",
            UpstreamTransport::http(everything.url.clone()),
        ))
        .upstream(UpstreamConfig::new(
            "fs",
            UpstreamTransport::stdio(node())
                .arg(package("server-filesystem"))
                .arg(fs_dir.to_string_lossy()),
        ))
        .backoff(backoff());
    let agg = Aggregator::start_with(
        c,
        tools.clone(),
        Forward::new().resources(resources.clone()),
    )
    .expect("valid");
    for ns in ["ev", "evh", "fs"] {
        assert!(
            agg.wait_connected(ns, 1, WAIT).await,
            "{ns}: {:?}",
            agg.status(ns)
        );
    }
    // server-filesystem offers no resources: nothing is registered for it, its tools are.
    assert!(
        agg.resources_of("fs").is_empty(),
        "{:?}",
        agg.resources_of("fs")
    );
    assert!(agg.tools_of("fs").iter().any(|t| t == "fs__read_text_file"));

    let (url, _server) = serve(tools, resources).await;
    let (client, _updates) = client(&url).await;

    let listed = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    for ns in ["ev", "evh"] {
        let want = format!("{ns}+{DOC}");
        assert!(
            uris.contains(&want.as_str()),
            "{want} missing from {uris:?}"
        );
    }
    assert!(
        uris.iter()
            .all(|u| u.starts_with("ev+") || u.starts_with("evh+")),
        "{uris:?}"
    );
    let doc = listed
        .iter()
        .find(|r| r.uri == format!("ev+{DOC}"))
        .expect("listed");
    assert_eq!(doc.name, "architecture.md");
    assert_eq!(doc.mime_type.as_deref(), Some("text/markdown"));

    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    let ts: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    for want in [
        "ev+demo://resource/dynamic/text/{resourceId}",
        "ev+demo://resource/dynamic/blob/{resourceId}",
        "evh+demo://resource/dynamic/text/{resourceId}",
    ] {
        assert!(ts.contains(&want), "{want} missing from {ts:?}");
    }

    // A static document over HTTP, a text template over stdio, a blob template over HTTP.
    let read = client
        .read_resource(ReadResourceRequestParams::new(format!("evh+{DOC}")))
        .await
        .expect("read doc");
    match read.contents.first() {
        Some(ResourceContents::TextResourceContents { uri, text, .. }) => {
            assert_eq!(uri, &format!("evh+{DOC}"));
            assert!(!text.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "ev+demo://resource/dynamic/text/7",
        ))
        .await
        .expect("read text");
    match read.contents.first() {
        Some(ResourceContents::TextResourceContents {
            uri,
            text,
            mime_type,
            ..
        }) => {
            assert_eq!(uri, "ev+demo://resource/dynamic/text/7");
            assert!(
                text.starts_with("Resource 7: This is a plaintext resource"),
                "{text}"
            );
            assert_eq!(mime_type.as_deref(), Some("text/plain"));
        }
        other => panic!("{other:?}"),
    }
    // A tool's resource links name the resources as the aggregator lists them: read through it.
    let links = client
        .call_tool(
            CallToolRequestParams::new("ev__get-resource-links")
                .with_arguments(json!({"count": 2}).as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("tools/call");
    let linked: Vec<String> = links
        .content
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .filter(|v| v["type"] == "resource_link")
        .filter_map(|v| v["uri"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        linked,
        [
            "ev+demo://resource/dynamic/blob/1",
            "ev+demo://resource/dynamic/text/2"
        ],
        "{links:?}"
    );
    for uri in &linked {
        let read = client
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
            .unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(read.contents.len(), 1, "{uri}: {read:?}");
    }
    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "evh+demo://resource/dynamic/blob/3",
        ))
        .await
        .expect("read blob");
    match read.contents.first() {
        Some(ResourceContents::BlobResourceContents { uri, blob, .. }) => {
            assert_eq!(uri, "evh+demo://resource/dynamic/blob/3");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(blob)
                .expect("base64");
            let text = String::from_utf8(bytes).expect("utf-8");
            assert!(
                text.starts_with("Resource 3: This is a base64 blob"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }

    // Refused with resource-not-found: an unknown upstream, no prefix, prefix injection (another
    // upstream's prefix inside, a doubled prefix, an empty namespace), an unlisted URI of a known
    // upstream, and a path escape out of a template segment.
    for uri in [
        "nope+demo://resource/dynamic/text/1".to_string(),
        "demo://resource/dynamic/text/1".to_string(),
        format!("ev+evh+{DOC}"),
        format!("ev+ev+{DOC}"),
        format!("+{DOC}"),
        format!("EV+{DOC}"),
        "ev+".to_string(),
        "ev+demo://resource/static/document/missing.md".to_string(),
        "ev+demo://resource/dynamic/text/1/../../static/document/architecture.md".to_string(),
    ] {
        let err = client
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
            .expect_err(&uri);
        assert_eq!(
            mcp_code(&err),
            Some(ErrorCode::RESOURCE_NOT_FOUND),
            "{uri}: {err}"
        );
        #[allow(deprecated)]
        let err = client
            .subscribe(SubscribeRequestParams::new(uri.clone()))
            .await
            .expect_err(&uri);
        assert_eq!(
            mcp_code(&err),
            Some(ErrorCode::RESOURCE_NOT_FOUND),
            "{uri}: {err}"
        );
    }
    // A template match the upstream itself refuses (not a positive integer) is an error too.
    let err = client
        .read_resource(ReadResourceRequestParams::new(
            "ev+demo://resource/dynamic/text/abc",
        ))
        .await
        .expect_err("refused upstream");
    assert!(err.to_string().contains("upstream_error"), "{err}");

    let _ = client.cancel().await;
    agg.shutdown().await;
    let _ = std::fs::remove_dir_all(&fs_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_relayed_stopped_and_renewed_after_a_reconnect() {
    let tools = ToolRegistry::new();
    let resources = ResourceRegistry::new();
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .backoff(backoff());
    let agg = Aggregator::start_with(
        c,
        tools.clone(),
        Forward::new().resources(resources.clone()),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("ev", 1, WAIT).await,
        "{:?}",
        agg.status("ev")
    );
    let (url, _server) = serve(tools.clone(), resources.clone()).await;
    let (one, mut one_updates) = client(&url).await;
    let (two, mut two_updates) = client(&url).await;
    let a = format!("ev+{DOC}");
    let b = format!("ev+{OTHER_DOC}");

    #[allow(deprecated)]
    {
        one.subscribe(SubscribeRequestParams::new(a.clone()))
            .await
            .expect("subscribe a");
        two.subscribe(SubscribeRequestParams::new(b.clone()))
            .await
            .expect("subscribe b");
    }
    wait_until("both URIs subscribed upstream", || {
        agg.upstream_subscriptions("ev") == vec![DOC.to_string(), OTHER_DOC.to_string()]
    })
    .await;

    // Start the upstream's simulated updates (one round at once, then every 5 s).
    let started = tools
        .call(
            &reader(),
            "ev__toggle-subscriber-updates",
            json!({}),
            CallOptions::default(),
        )
        .await
        .expect("toggle");
    assert!(!started.is_error, "{started:?}");
    let got = tokio::time::timeout(WAIT, one_updates.recv())
        .await
        .expect("client one hears an update")
        .expect("open");
    assert_eq!(got, a);
    let got = tokio::time::timeout(WAIT, two_updates.recv())
        .await
        .expect("client two hears an update")
        .expect("open");
    assert_eq!(got, b);

    // Client one leaves: the upstream subscription to A ends, B stays.
    #[allow(deprecated)]
    one.unsubscribe(UnsubscribeRequestParams::new(a.clone()))
        .await
        .expect("unsubscribe");
    wait_until("A unsubscribed upstream", || {
        agg.upstream_subscriptions("ev") == vec![OTHER_DOC.to_string()]
    })
    .await;
    assert_eq!(resources.subscriber_count(&a), 0);
    while one_updates.try_recv().is_ok() {}
    // Two more rounds reach client two (so the upstream kept ticking after A ended); client one
    // hears nothing in the meantime, and each client only ever heard its own URI.
    for _ in 0..2 {
        let got = tokio::time::timeout(WAIT, two_updates.recv())
            .await
            .expect("client two keeps hearing B")
            .expect("open");
        assert_eq!(got, b);
    }
    assert!(one_updates.try_recv().is_err(), "client one still hears A");

    // Kill the upstream: after the reconnect, B is subscribed again on the new process and its
    // updates reach client two once the new process's updates are started. (Updates are five
    // seconds apart: none is left over from the old process once these are drained.)
    while two_updates.try_recv().is_ok() {}
    let pid = agg.upstream_pid("ev").expect("pid");
    let killed = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(killed.success());
    assert!(
        agg.wait_connected("ev", 2, WAIT).await,
        "{:?}",
        agg.status("ev")
    );
    wait_until("B subscribed again after the reconnect", || {
        agg.upstream_subscriptions("ev") == vec![OTHER_DOC.to_string()]
    })
    .await;
    // The registered resource survived the reconnect, so client two's subscription did too.
    assert_eq!(resources.subscriber_count(&b), 1);
    // B may have changed while no process held it: client two is told it was updated, before
    // the new process sends any update of its own (its updates are not started yet).
    let got = tokio::time::timeout(WAIT, two_updates.recv())
        .await
        .expect("client two hears that B may have changed")
        .expect("open");
    assert_eq!(got, b);
    while two_updates.try_recv().is_ok() {}
    let out = tools
        .call(
            &reader(),
            "ev__toggle-subscriber-updates",
            json!({}),
            CallOptions::default(),
        )
        .await
        .expect("toggle");
    assert!(!out.is_error, "{out:?}");
    let got = tokio::time::timeout(WAIT, two_updates.recv())
        .await
        .expect("client two hears the new process")
        .expect("open");
    assert_eq!(got, b);

    // Client two disconnecting ends the last subscription upstream.
    let _ = two.cancel().await;
    wait_until("nothing subscribed upstream", || {
        agg.upstream_subscriptions("ev").is_empty()
    })
    .await;
    let _ = one.cancel().await;
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_hanging_and_garbage_upstreams_resources_answer_stable_codes() {
    let mut everything = HttpEverything::start().await;
    let tools = ToolRegistry::new();
    let resources = ResourceRegistry::new();
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .upstream(UpstreamConfig::new(
            "evh",
            UpstreamTransport::http(everything.url.clone()),
        ))
        .upstream(UpstreamConfig::new("raw", raw_upstream()).call_timeout(RAW_CALL_TIMEOUT))
        .backoff(backoff());
    let agg = Aggregator::start_with(
        c,
        tools.clone(),
        Forward::new().resources(resources.clone()),
    )
    .expect("valid");
    for ns in ["ev", "evh", "raw"] {
        assert!(
            agg.wait_connected(ns, 1, WAIT).await,
            "{ns}: {:?}",
            agg.status(ns)
        );
    }
    assert_eq!(
        agg.resources_of("raw"),
        vec![
            "raw+raw://garbage".to_string(),
            "raw+raw://hang".to_string()
        ]
    );
    // A template syntax the registry cannot match is skipped and reported, not half-served.
    let skipped = agg.skipped_resources("raw");
    assert!(
        skipped.iter().any(|(t, _)| t == "raw+raw://search{?q}"),
        "{skipped:?}"
    );

    let err = tokio::time::timeout(WAIT, resources.read("raw+raw://hang"))
        .await
        .expect("the hanging read ends")
        .expect_err("timed out");
    assert!(
        matches!(&err, ResourceError::ReadFailed { message, .. } if message.starts_with(UPSTREAM_TIMEOUT)),
        "{err:?}"
    );
    let err = resources
        .read("raw+raw://garbage")
        .await
        .expect_err("garbage");
    assert!(
        matches!(&err, ResourceError::ReadFailed { message, .. } if message.starts_with(UPSTREAM_INVALID_RESULT)),
        "{err:?}"
    );

    // The HTTP upstream dies: its resources stay listed and answer upstream_unavailable (the
    // first read may be the one that finds the transport broken), the others keep working.
    let uri = format!("evh+{DOC}");
    assert!(resources.read(&uri).await.is_ok());
    everything.stop();
    eventually_async_ok(
        "the resource read to answer upstream_unavailable",
        || async {
            match resources.read(&uri).await {
                Err(ResourceError::ReadFailed { message, .. })
                    if message.starts_with(UPSTREAM_UNAVAILABLE) =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(resources.exists(&uri));
    let ok = resources
        .read(&format!("ev+{DOC}"))
        .await
        .expect("ev still reads");
    assert!(matches!(&ok[0].body, ResourceBody::Text(t) if !t.is_empty()));
    let ok = resources.read("raw+raw://garbage").await;
    assert!(ok.is_err());
    agg.shutdown().await;
}

#[tokio::test]
async fn namespaces_that_cannot_prefix_a_scheme_are_refused_only_with_resources() {
    for ns in ["f_s", "2fs", "-fs"] {
        let c = || AggregatorConfig::new().upstream(UpstreamConfig::new(ns, everything_stdio()));
        let err = Aggregator::start_with(
            c(),
            ToolRegistry::new(),
            Forward::new().resources(ResourceRegistry::new()),
        )
        .expect_err(ns);
        assert_eq!(err.code(), "invalid_namespace", "{ns}");
        // Without resource forwarding the same namespace is fine.
        let agg = Aggregator::start(c(), ToolRegistry::new()).expect(ns);
        agg.shutdown().await;
    }
    // Schemes are case-insensitive: `ev` and `EV` would share one.
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .upstream(UpstreamConfig::new("EV", everything_stdio()));
    let err = Aggregator::start_with(
        c,
        ToolRegistry::new(),
        Forward::new().resources(ResourceRegistry::new()),
    )
    .expect_err("case duplicates");
    assert_eq!(err.code(), "invalid_namespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_pages_list_changes_and_updates_are_followed() {
    use kberg_core::{ResourceContents, ResourceDescriptor, ResourceEvent, ResourceTemplate};
    // The upstream: a Kberg server paging its lists two at a time, with five notes and a
    // template, whose resources change at runtime.
    let upstream = ResourceRegistry::new();
    for i in 1..=5 {
        upstream
            .register_text(
                ResourceDescriptor::new(format!("notes://n{i}"), format!("n{i}")),
                format!("note {i}"),
            )
            .expect("register");
    }
    upstream
        .register_template(
            ResourceTemplate::new("notes://by-id/{id}", "by id"),
            kberg_core::reader_fn(|uri, vars| async move {
                let id = vars.get("id").cloned().unwrap_or_default();
                Ok(vec![ResourceContents::text(
                    uri,
                    None,
                    format!("note #{id}"),
                )])
            }),
        )
        .expect("template");
    let server = RunningServer::start(
        McpApp::builder("notes", "1")
            .resources(upstream.clone())
            .page_size(2)
            .build(),
        loopback()
            .auth(BearerTokens::new().with_token("upstream-secret", Principal::new("aggregator"))),
    )
    .await;
    let url = server.url.clone();
    let _stop = server.into_guard();

    let resources = ResourceRegistry::new();
    let agg = Aggregator::start_with(
        AggregatorConfig::new().upstream(UpstreamConfig::new(
            "app",
            UpstreamTransport::http(url).header("authorization", "Bearer upstream-secret"),
        )),
        ToolRegistry::new(),
        Forward::new().resources(resources.clone()),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("app", 1, WAIT).await,
        "{:?}",
        agg.status("app")
    );
    let mut want: Vec<String> = (1..=5).map(|i| format!("app+notes://n{i}")).collect();
    want.push("app+notes://by-id/{id}".to_string());
    want.sort();
    assert_eq!(agg.resources_of("app"), want, "every page was followed");
    let read = resources
        .read("app+notes://by-id/42")
        .await
        .expect("template read");
    assert_eq!(read[0].uri, "app+notes://by-id/42");
    assert_eq!(read[0].body, ResourceBody::Text("note #42".into()));

    // A subscriber here makes the aggregator subscribe upstream; the upstream's update reaches it.
    let mut sub = resources.subscriber();
    sub.subscribe("app+notes://n1").expect("subscribe");
    wait_until("n1 subscribed upstream", || {
        agg.upstream_subscriptions("app") == vec!["notes://n1".to_string()]
    })
    .await;
    wait_until("the upstream has the aggregator's subscription", || {
        upstream.subscriber_count("notes://n1") == 1
    })
    .await;
    assert_eq!(upstream.notify_updated("notes://n1"), 1);
    let ev = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("relayed update")
        .expect("open");
    assert_eq!(
        ev,
        ResourceEvent::Updated {
            uri: "app+notes://n1".into()
        }
    );

    // List changes upstream: one added, one removed, n1's description changed. The aggregated
    // registry follows, and the subscription to n1 survives its replacement.
    let mut changes = resources.changes();
    upstream
        .register_text(ResourceDescriptor::new("notes://n6", "n6"), "note 6")
        .expect("add");
    assert!(upstream.remove("notes://n5"));
    upstream
        .register_or_replace(
            ResourceDescriptor::new("notes://n1", "n1").description("edited"),
            kberg_core::reader_fn(|uri, _| async move {
                Ok(vec![ResourceContents::text(uri, None, "note 1, edited")])
            }),
        )
        .expect("replace");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = agg.resources_of("app");
        let edited = resources
            .list(None, 100)
            .expect("list")
            .items
            .iter()
            .any(|d| d.uri == "app+notes://n1" && d.description.as_deref() == Some("edited"));
        if now.contains(&"app+notes://n6".to_string())
            && !now.contains(&"app+notes://n5".to_string())
            && edited
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not followed: {now:?}"
        );
        let _ = tokio::time::timeout(Duration::from_millis(200), changes.changed()).await;
    }
    assert!(!resources.exists("app+notes://n5"));
    let read = resources.read("app+notes://n1").await.expect("read");
    assert_eq!(read[0].body, ResourceBody::Text("note 1, edited".into()));
    assert_eq!(resources.subscriber_count("app+notes://n1"), 1);
    assert_eq!(
        agg.upstream_subscriptions("app"),
        vec!["notes://n1".to_string()]
    );

    // Dropping the last subscriber ends the upstream subscription.
    drop(sub);
    wait_until("n1 unsubscribed upstream", || {
        agg.upstream_subscriptions("app").is_empty() && upstream.subscriber_count("notes://n1") == 0
    })
    .await;
    agg.shutdown().await;
}

/// Subscribing upstream waits for the upstream's answer, but nothing else does: an upstream
/// that never answers `resources/subscribe` holds up neither the aggregator's shutdown nor its
/// other calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_answers_a_subscribe_holds_up_nothing() {
    let tools = ToolRegistry::new();
    let resources = ResourceRegistry::new();
    let c = AggregatorConfig::new()
        .upstream(
            UpstreamConfig::new("raw", raw_upstream().env("RAW_SUBSCRIBE", "hang"))
                .call_timeout(Duration::from_secs(600)),
        )
        .backoff(backoff());
    let agg = Aggregator::start_with(
        c,
        tools.clone(),
        Forward::new().resources(resources.clone()),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    let subscriber = resources.subscriber();
    subscriber
        .subscribe("raw+raw://garbage")
        .expect("a registered resource");
    // The subscribe reached the upstream, which never answers it.
    eventually_async("the upstream to be asked to subscribe", || async {
        let out = tools
            .call(
                &reader(),
                "raw__subscribes",
                json!({}),
                CallOptions::default(),
            )
            .await
            .expect("the call");
        out.all_text().contains("raw://garbage").then_some(())
    })
    .await;
    assert!(agg.upstream_subscriptions("raw").is_empty());
    // Other calls go on meanwhile, and shutdown does not wait for the answer.
    let out = tools
        .call(
            &reader(),
            "raw__cancelled",
            json!({}),
            CallOptions::default(),
        )
        .await
        .expect("the call");
    assert!(!out.is_error, "{out:?}");
    tokio::time::timeout(WAIT, agg.shutdown())
        .await
        .expect("shutdown does not wait for the upstream's answer");
}
