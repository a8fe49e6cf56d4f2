//! MCP Apps (the `io.modelcontextprotocol/ui` extension) through kberg-server: a Kberg app that
//! serves one itself, and the aggregator in front of one served by the official Python SDK
//! (`aggregate_apps_upstream.py`). A host shows an app's view when a tool's `_meta.ui`
//! names a `ui://` resource that it can read, with the `_meta.ui` of that resource (the view's
//! content security policy); so every `_meta` must reach the client, and a forwarded view
//! must keep the `ui://` scheme under the aggregator's namespace and still read.

use kberg_core::{
    Icon, IconTheme, Principal, PromptRegistry, ResourceContents, ResourceDescriptor,
    ResourceRegistry, Tool as _, ToolBuilder, ToolOutput, ToolRegistry, reader_fn,
};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Forward, UpstreamConfig, UpstreamTransport,
};
use kberg_server::{BearerTokens, McpApp};
use kberg_testkit::WAIT;
use kberg_testkit::net::StopOnDrop;
use kberg_testkit::serve::{RunningServer, loopback};
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, Tool};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

const MIME: &str = "text/html;profile=mcp-app";

fn icons() -> Value {
    json!([{"src": "https://icons.example/clock.svg", "mimeType": "image/svg+xml",
            "sizes": ["any"], "theme": "dark"}])
}

/// The `icons` of the entry whose `key` is `name` in a listing's JSON.
fn icons_of(listed: &Value, key: &str, name: &str) -> Value {
    listed
        .as_array()
        .and_then(|all| all.iter().find(|e| e[key] == name))
        .map(|e| e["icons"].clone())
        .unwrap_or_else(|| panic!("{name} is listed: {listed}"))
}

async fn serve(
    tools: ToolRegistry,
    resources: ResourceRegistry,
    prompts: PromptRegistry,
) -> (String, StopOnDrop) {
    let server = RunningServer::start(
        McpApp::builder("apps", "1")
            .tools(tools)
            .resources(resources)
            .prompts(prompts)
            .build(),
        loopback().auth(BearerTokens::new().with_token("agent-token", Principal::new("agent"))),
    )
    .await;
    let url = server.url.clone();
    (url, server.into_guard())
}

async fn client(url: &str) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header("agent-token"),
    ))
    .await
    .expect("client connects")
}

fn meta_of(tool: &Tool) -> Value {
    tool.meta
        .as_ref()
        .map_or(Value::Null, |m| Value::Object(m.0.clone()))
}

async fn listed(c: &RunningService<RoleClient, ()>, name: &str) -> Tool {
    let tools = c.list_all_tools().await.expect("tools/list");
    tools
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
}

/// The JSON a client got for a `resources/read` of `uri`.
async fn read(c: &RunningService<RoleClient, ()>, uri: &str) -> Value {
    let r = c
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap_or_else(|e| panic!("{uri} reads: {e}"));
    serde_json::to_value(r).expect("serializes")
}

async fn call(c: &RunningService<RoleClient, ()>, name: &str) -> Value {
    let r = c
        .call_tool(CallToolRequestParams::new(name.to_string()))
        .await
        .unwrap_or_else(|e| panic!("{name} answers: {e}"));
    serde_json::to_value(r).expect("serializes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kberg_app_serves_an_mcp_app_with_every_meta() {
    let tools = ToolRegistry::new();
    let clock = ToolBuilder::new("clock")
        .meta("ui", json!({"resourceUri": "ui://clock/app.html"}))
        .icon(
            Icon::new("https://icons.example/clock.svg")
                .with_mime_type("image/svg+xml")
                .with_sizes(["any"])
                .with_theme(IconTheme::Dark),
        )
        .sync_handler(|_: Value, _| {
            Ok(ToolOutput::json(&json!({"time": "12:00"}))?.with_meta("example.com/at", json!(1)))
        });
    assert_eq!(
        clock.spec().meta["ui"]["resourceUri"],
        "ui://clock/app.html"
    );
    tools.register(clock).unwrap();
    let resources = ResourceRegistry::new();
    resources
        .register(
            ResourceDescriptor::new("ui://clock/app.html", "clock view")
                .mime_type(MIME)
                .meta("ui", json!({"prefersBorder": true})),
            reader_fn(|uri, _| async move {
                Ok(vec![
                    ResourceContents::text(uri, Some(MIME), "<html>clock</html>").meta(
                        "ui",
                        json!({"csp": {"connectDomains": ["https://time.example.com"]}}),
                    ),
                ])
            }),
        )
        .unwrap();
    let (url, _server) = serve(tools, resources, PromptRegistry::new()).await;
    let c = client(&url).await;

    assert_eq!(
        meta_of(&listed(&c, "clock").await),
        json!({"ui": {"resourceUri": "ui://clock/app.html"}})
    );
    let all_tools = serde_json::to_value(c.list_all_tools().await.unwrap()).unwrap();
    assert_eq!(icons_of(&all_tools, "name", "clock"), icons());
    let listed = serde_json::to_value(c.list_all_resources().await.unwrap()).unwrap();
    assert_eq!(
        listed[0]["_meta"],
        json!({"ui": {"prefersBorder": true}}),
        "{listed}"
    );
    let contents = read(&c, "ui://clock/app.html").await;
    assert_eq!(
        contents["contents"][0]["_meta"],
        json!({"ui": {"csp": {"connectDomains": ["https://time.example.com"]}}}),
        "{contents}"
    );
    let result = call(&c, "clock").await;
    assert_eq!(result["_meta"], json!({"example.com/at": 1}), "{result}");
    c.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_app_behind_the_aggregator_keeps_its_view() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/aggregate_apps_upstream.py"
    );
    let python = kberg_testkit::tools::python();
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "up",
        UpstreamTransport::stdio(python.to_string_lossy()).arg(script),
    ));
    let tools = ToolRegistry::new();
    let resources = ResourceRegistry::new();
    let prompts = PromptRegistry::new();
    let agg = Aggregator::start_with(
        config,
        tools.clone(),
        Forward::new()
            .resources(resources.clone())
            .prompts(prompts.clone()),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    let (url, _server) = serve(tools, resources, prompts).await;
    let c = client(&url).await;

    // The view keeps the `ui://` scheme (a host renders no other), under the namespace.
    let view = "ui://up/clock/app.html";
    assert_eq!(
        meta_of(&listed(&c, "up__clock").await),
        json!({"example.com/kind": "clock", "ui": {"resourceUri": view}})
    );
    assert_eq!(
        meta_of(&listed(&c, "up__refresh").await),
        json!({"ui": {"resourceUri": view, "visibility": ["app"]}})
    );
    assert_eq!(
        meta_of(&listed(&c, "up__chart").await),
        json!({"openai/outputTemplate": view, "ui/resourceUri": view})
    );

    let view_meta = json!({"ui": {
        "csp": {"connectDomains": ["https://time.example.com"]},
        "prefersBorder": true,
    }});
    let listed = serde_json::to_value(c.list_all_resources().await.unwrap()).unwrap();
    let entry = listed
        .as_array()
        .and_then(|all| all.iter().find(|r| r["uri"] == view))
        .unwrap_or_else(|| panic!("{view} is listed: {listed}"));
    assert_eq!(entry["mimeType"], MIME);
    assert_eq!(entry["_meta"], view_meta, "{entry}");
    let contents = read(&c, view).await;
    let first = &contents["contents"][0];
    assert_eq!(first["uri"], view);
    assert_eq!(first["mimeType"], MIME);
    assert_eq!(first["text"], "<html>clock</html>");
    assert_eq!(first["_meta"], view_meta, "{contents}");

    // Icons, where the upstream gave them.
    let all_tools = serde_json::to_value(c.list_all_tools().await.unwrap()).unwrap();
    assert_eq!(icons_of(&all_tools, "name", "up__clock"), icons());
    let all_resources = serde_json::to_value(c.list_all_resources().await.unwrap()).unwrap();
    assert_eq!(icons_of(&all_resources, "uri", "up+res://logo"), icons());
    let templates = serde_json::to_value(c.list_all_resource_templates().await.unwrap()).unwrap();
    assert_eq!(
        icons_of(&templates, "uriTemplate", "up+res://logo/{size}"),
        icons()
    );
    let all_prompts = serde_json::to_value(c.list_all_prompts().await.unwrap()).unwrap();
    assert_eq!(icons_of(&all_prompts, "name", "up__greet"), icons());

    let result = call(&c, "up__clock").await;
    assert_eq!(
        result["_meta"],
        json!({"example.com/result": "r"}),
        "{result}"
    );
    assert_eq!(result["structuredContent"], json!({"time": "12:00"}));
    assert_eq!(
        result["content"][0],
        json!({"type": "text", "text": "12:00", "_meta": {"example.com/block": 1}}),
        "{result}"
    );
    assert_eq!(
        result["content"][1],
        json!({"type": "resource_link", "uri": view, "name": "app", "title": "The clock",
               "size": 18, "icons": icons()}),
        "{result}"
    );
    assert_eq!(
        call(&c, "up__refresh").await["content"][0]["text"],
        "refreshed"
    );
    c.cancel().await.ok();
    agg.shutdown().await;
}
