//! Upstreams that echo the credential the gateway injects, over real HTTP on 127.0.0.1: one
//! fails `tools/list` with an error quoting it (for every connection: `broken`; for one agent's
//! own secret: `echo` as codex), and one answers a tool call with the token in every place a
//! result can carry text (a text block, a resource link's URI, name and description, an
//! embedded resource's URI and text, a blob's bytes, a structured key), and one (`chatty`)
//! logs the token to its client and reports progress quoting it while the call runs. The
//! canary values reach neither the agents' answers (the raw HTTP bodies, the relayed log and
//! progress messages included), the admin API's integrations, `/readyz`, the audit log, nor
//! the log. An upstream that quotes the token in its tool listing (`listing`) has it scrubbed
//! from the tools every agent is offered.
//!
//! The upstream is a stand-in written from the Streamable HTTP transport's documented shapes:
//! JSON-RPC over POST, each request answered with one JSON body (`chatty`'s call with an event
//! stream: its notifications, then its answer), notifications with 202, no session id (so the
//! client opens no stream of its own; GET answers 405).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;
use std::time::Duration;

use admin_support::gateway::{Gw, answer_in};
use admin_support::upstream::json_answer;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use bridle_gateway::upstreams::FolderSecrets;
use bridle_rules::ReadWrite;
use futures::StreamExt as _;
use kberg_testkit::eventually_async_ok;
use kberg_testkit::log::LogBuffer;
use serde_json::{Value, json};
use tokio::sync::watch;

/// The secret every connection of `broken`, and the shared connection of `echo`, carries.
const CANARY: &str = "canary-echoed-token-3Rk8Zw";
/// codex's own secret for `echo`; the stand-in refuses to list tools for it.
const CANARY_REFUSED: &str = "canary-refused-token-6Tn1Yp";

/// `/broken` fails every `tools/list`, quoting the `Authorization` header it got; `/echo` does
/// so only for a token with `refused` in it, and otherwise offers `leak`, whose result echoes
/// the token everywhere.
async fn stand_in(
    State(release): State<watch::Receiver<bool>>,
    Path(mode): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let token = auth.strip_prefix("token ").unwrap_or(&auth).to_string();
    let result = |r: Value| json!({"jsonrpc": "2.0", "id": id, "result": r});
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(result(json!({
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1"},
        }))),
        // `/listing` describes its one tool with the token it was listed with: in its title,
        // its description, and its input and output schemas.
        "tools/list" if mode == "listing" => json_answer(result(json!({"tools": [{
            "name": "describe",
            "title": format!("Describe as {token}"),
            "description": format!("Says who you are ({token})."),
            "inputSchema": {"type": "object", "properties": {
                "as": {"type": "string", "description": format!("defaults to {token}"), "default": token},
            }},
            "outputSchema": {"type": "object", "properties": {
                token.clone(): {"type": "string"},
            }},
            "annotations": {"readOnlyHint": true, "title": format!("Describe {token}")},
        }]}))),
        "tools/list" if mode == "broken" || token.contains("refused") => json_answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32603, "message": format!("`{auth}` may not list tools")},
        })),
        "tools/list" => json_answer(result(json!({"tools": [{
            "name": "leak",
            "description": "Says who you are, in many ways.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
        }, {
            "name": "chatty",
            "description": "Logs and reports progress while it works.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
        }]}))),
        "tools/call" if msg["params"]["name"] == "chatty" => {
            // Its notifications at once, its answer once the test has seen them relayed (the
            // relay handles a notification on a task of its own: an answer right behind it
            // could end the call first).
            let progress = msg["params"]["_meta"]["progressToken"].clone();
            let event =
                |e: Value| Ok::<_, std::io::Error>(format!("event: message\ndata: {e}\n\n"));
            let notes = [
                json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {
                    "level": "error", "logger": "backend",
                    "data": {"error": format!("access token does not exist [sha: {token}]")},
                }}),
                json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                    "progressToken": progress, "progress": 1, "total": 2,
                    "message": format!("retrying with {token}"),
                }}),
            ];
            let answer = result(json!({"content": [{"type": "text", "text": "done"}]}));
            let mut release = release.clone();
            let body =
                futures::stream::iter(notes.map(event)).chain(futures::stream::once(async move {
                    let _ = release.wait_for(|r| *r).await;
                    event(answer)
                }));
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(body),
            )
                .into_response()
        }
        "tools/call" => json_answer(result(json!({
            "content": [
                {"type": "text", "text": format!("you are {token}")},
                {
                    "type": "resource_link",
                    "uri": format!("https://git.example/raw?access_token={token}"),
                    "name": format!("{token}.txt"),
                    "description": format!("the file of {token}"),
                },
                {"type": "resource", "resource": {
                    "uri": format!("mem://{token}"),
                    "mimeType": "text/plain",
                    "text": format!("token {token}"),
                }},
                {"type": "resource", "resource": {
                    "uri": "mem://blob",
                    "mimeType": "application/octet-stream",
                    "blob": base64::engine::general_purpose::STANDARD
                        .encode(format!("token {token}")),
                }},
            ],
            "structuredContent": {"tokens": {token.clone(): "active"}},
        }))),
        "ping" => json_answer(result(json!({}))),
        _ => json_answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "Method not found"},
        })),
    }
}

/// The stand-in's address, and what releases `chatty`'s answers.
async fn start_stand_in() -> (String, watch::Sender<bool>) {
    let (release, released) = watch::channel(false);
    let app = Router::new()
        .route(
            "/{mode}",
            post(stand_in).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(released);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), release)
}

/// One stateless `tools/call` (protocol 2026-07-28) as `agent`: the raw body and the JSON-RPC
/// answer in it (a JSON body or an event stream).
async fn call_raw(gw: &Gw, agent: &str, tool: &str) -> (String, Value) {
    let r = gw.send_stateless_call(agent, tool, json!({})).await;
    let raw = r.text().await.unwrap();
    (raw.clone(), answer_in(&raw))
}

/// The messages of an event stream that are not answers.
fn notifications_in(raw: &str) -> Vec<Value> {
    raw.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|t| serde_json::from_str::<Value>(t.trim()).ok())
        .filter(|v| v.get("method").is_some())
        .collect()
}

fn assert_clean(what: &str, text: &str) {
    for canary in [CANARY, CANARY_REFUSED] {
        assert!(!text.contains(canary), "{what} holds a canary:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_an_upstream_echoes_reach_no_agent_operator_probe_or_log() {
    let logs = LogBuffer::default();
    logs.install_global(bridle_gateway::logging::log_targets("trace"));

    let (base, release) = start_stand_in().await;
    let secrets = tempfile::tempdir().unwrap();
    for (name, value) in [
        ("broken-token", CANARY),
        ("echo-shared", CANARY),
        ("echo-codex", CANARY_REFUSED),
    ] {
        std::fs::write(secrets.path().join(name), format!("{value}\n")).unwrap();
    }
    let yaml = format!(
        "upstreams:\n  broken:\n    http: {{url: '{base}/broken'}}\n    credential: {{secret: broken-token, format: 'token {{secret}}'}}\n  echo:\n    http: {{url: '{base}/echo'}}\n    credential:\n      secret: echo-shared\n      per_agent: {{codex: echo-codex}}\n      format: 'token {{secret}}'\n"
    );
    let folder = Arc::new(FolderSecrets::new(secrets.path()));
    let gw = Gw::start_with_yaml(&yaml, |b| {
        b.secrets(folder).connect_timeout(Duration::from_secs(3))
    })
    .await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    for agent in ["claude", "codex"] {
        doc.permissions.get_mut(agent).unwrap().tools.insert(
            "echo".into(),
            ReadWrite {
                read: true,
                write: false,
            },
        );
    }
    gw.ctx
        .store
        .save_edit("demo", &doc, revision, "test", "claude and codex read echo")
        .unwrap();

    // The operator's view: `echo` offers its tool, `broken` says why it cannot.
    let integrations = eventually_async_ok("echo up and broken's error reported", || async {
        let list: Value = gw
            .get("/integrations")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let of = |ns: &str| {
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["namespace"] == ns)
                .cloned()
                .unwrap_or(Value::Null)
        };
        let (echo, broken) = (of("echo"), of("broken"));
        if echo["tool_count"] == 2 && broken["last_error"].is_string() {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let text = integrations.to_string();
    assert!(text.contains("may not list tools"), "{text}");
    assert_clean("the admin API's integrations", &text);

    // `/readyz`, which anyone may read, names the failure without the token.
    let readyz = gw.mcp.trim_end_matches("/mcp").to_string() + "/readyz";
    let r = gw.http.get(readyz).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let body = r.text().await.unwrap();
    assert!(body.contains("may not list tools"), "{body}");
    assert_clean("/readyz", &body);

    // An agent whose own connection cannot list: refused, the reason without its token.
    let (raw, answer) = call_raw(&gw, "codex", "echo__leak").await;
    assert_eq!(
        answer["result"]["structuredContent"]["code"], "upstream_unavailable",
        "{raw}"
    );
    assert!(raw.contains("may not list tools"), "{raw}");
    assert_clean("codex's answer", &raw);

    // A result echoing the token everywhere: the agent gets it scrubbed, blobs included.
    let (raw, answer) = call_raw(&gw, "claude", "echo__leak").await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{raw}");
    assert!(raw.contains("[redacted]"), "{raw}");
    assert_clean("claude's answer", &raw);
    let content = result["content"].as_array().unwrap();
    assert_eq!(content.len(), 4, "{raw}");
    assert_eq!(content[1]["type"], "resource_link", "{raw}");
    assert_eq!(content[2]["resource"]["text"], "token [redacted]", "{raw}");
    let blob = base64::engine::general_purpose::STANDARD
        .decode(content[3]["resource"]["blob"].as_str().unwrap())
        .unwrap();
    assert_eq!(blob, b"token [redacted]", "{raw}");
    assert_eq!(
        result["structuredContent"],
        json!({"tokens": {"[redacted]": "active"}}),
        "{raw}"
    );

    // What the upstream sends while a call runs: its log message and its progress reach the
    // agent, the token scrubbed from both.
    let mut r = gw
        .send_stateless_call(
            "claude",
            "echo__chatty",
            json!({"progressToken": "p-1", "io.modelcontextprotocol/logLevel": "debug"}),
        )
        .await;
    let mut raw = String::new();
    while notifications_in(&raw).len() < 2 {
        let chunk = tokio::time::timeout(kberg_testkit::WAIT, r.chunk())
            .await
            .unwrap_or_else(|_| panic!("the relayed notifications; so far {raw}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended before its notifications: {raw}"));
        raw.push_str(&String::from_utf8_lossy(&chunk));
    }
    release.send_replace(true);
    raw.push_str(&r.text().await.unwrap());
    assert_eq!(
        answer_in(&raw)["result"]["content"][0]["text"],
        "done",
        "{raw}"
    );
    let relayed = notifications_in(&raw);
    let of = |method: &str| {
        relayed
            .iter()
            .find(|v| v["method"] == method)
            .unwrap_or_else(|| panic!("no {method} in {raw}"))
            .clone()
    };
    assert_eq!(
        of("notifications/message")["params"]["data"]["error"],
        "access token does not exist [sha: [redacted]]",
        "{raw}"
    );
    assert_eq!(
        of("notifications/progress")["params"]["message"],
        "retrying with [redacted]",
        "{raw}"
    );
    assert_clean("claude's relayed messages", &raw);

    assert_clean("the audit log", &gw.audit_export().await);
    assert_clean("the log", &logs.text());
    gw.stop().await;
}

/// The `tools/list` answer to a stateless request as `agent`: the raw body.
async fn list_raw(gw: &Gw, agent: &str) -> String {
    let r = gw
        .http
        .post(&gw.mcp)
        .bearer_auth(gw.file_token(agent))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    r.text().await.unwrap()
}

/// An upstream that describes its tools with the token it was listed with: the tools are
/// offered with the token scrubbed from their title, description and schemas, so no agent
/// reads it, and with per-agent secrets the agent whose connection lists the tools (the first
/// of the mapping) does not hand its token to the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_an_upstreams_tool_listing_reaches_no_agent() {
    let (base, _release) = start_stand_in().await;
    let secrets = tempfile::tempdir().unwrap();
    for (name, value) in [
        ("listing-claude", CANARY),
        ("listing-codex", CANARY_REFUSED),
    ] {
        std::fs::write(secrets.path().join(name), format!("{value}\n")).unwrap();
    }
    let yaml = format!(
        "upstreams:\n  listing:\n    http: {{url: '{base}/listing'}}\n    credential:\n      per_agent: {{claude: listing-claude, codex: listing-codex}}\n      format: 'token {{secret}}'\n"
    );
    let folder = Arc::new(FolderSecrets::new(secrets.path()));
    let gw = Gw::start_with_yaml(&yaml, |b| {
        b.secrets(folder).connect_timeout(Duration::from_secs(3))
    })
    .await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    for agent in ["claude", "codex"] {
        doc.permissions.get_mut(agent).unwrap().tools.insert(
            "listing".into(),
            ReadWrite {
                read: true,
                write: false,
            },
        );
    }
    gw.ctx
        .store
        .save_edit(
            "demo",
            &doc,
            revision,
            "test",
            "claude and codex read listing",
        )
        .unwrap();

    for agent in ["codex", "claude"] {
        let raw = eventually_async_ok("the listing upstream's tool offered", || async {
            let raw = list_raw(&gw, agent).await;
            if raw.contains("listing__describe") {
                Ok(raw)
            } else {
                Err(raw)
            }
        })
        .await;
        let tool = answer_in(&raw)["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "listing__describe")
            .cloned()
            .unwrap();
        assert_eq!(tool["title"], "Describe as [redacted]", "{raw}");
        assert_eq!(
            tool["description"], "Says who you are ([redacted]).",
            "{raw}"
        );
        assert_eq!(
            tool["inputSchema"]["properties"]["as"]["default"], "[redacted]",
            "{raw}"
        );
        assert_clean(&format!("{agent}'s tool listing"), &raw);
    }
    gw.stop().await;
}

/// A secret source with one value that ends in a space and a tab, as a token pasted with
/// what followed it is stored in the vault (which keeps a value as given).
struct Padded;

/// [`Padded`]'s value: the canary with trailing blanks.
const PADDED: &str = "canary-padded-token-9Qx2 \t";

impl bridle_gateway::upstreams::SecretSource for Padded {
    fn version(&self, _name: &str) -> Result<u64, bridle_gateway::upstreams::SecretError> {
        Ok(1)
    }
    fn current(
        &self,
        _name: &str,
    ) -> Result<(bridle_gateway::upstreams::Credential, u64), bridle_gateway::upstreams::SecretError>
    {
        Ok((bridle_gateway::upstreams::Credential::new(PADDED), 1))
    }
    fn record_use(
        &self,
        _used: &bridle_gateway::upstreams::SecretUse<'_>,
    ) -> Result<(), bridle_gateway::upstreams::SecretError> {
        Ok(())
    }
    fn blocks(&self, _name: &str) -> bool {
        false
    }
}

/// A credential stored with trailing blanks goes out in the header as stored, and the upstream
/// reads it without them (HTTP drops a field value's surrounding whitespace): what it echoes
/// is the token alone, which is scrubbed from the result all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_stored_with_trailing_blanks_is_scrubbed_as_the_upstream_read_it() {
    let (base, _release) = start_stand_in().await;
    let yaml = format!(
        "upstreams:\n  echo:\n    http: {{url: '{base}/echo'}}\n    credential: {{secret: padded, format: 'token {{secret}}'}}\n"
    );
    let gw = Gw::start_with_yaml(&yaml, |b| {
        b.secrets(Arc::new(Padded))
            .connect_timeout(Duration::from_secs(3))
    })
    .await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "echo".into(),
        ReadWrite {
            read: true,
            write: false,
        },
    );
    gw.ctx
        .store
        .save_edit("demo", &doc, revision, "test", "claude reads echo")
        .unwrap();
    let raw = eventually_async_ok("echo's tools offered", || async {
        let (raw, answer) = call_raw(&gw, "claude", "echo__leak").await;
        if answer["result"]["isError"] == false {
            Ok(raw)
        } else {
            Err(raw)
        }
    })
    .await;
    assert!(raw.contains("[redacted]"), "{raw}");
    let token = PADDED.trim();
    assert!(!raw.contains(token), "the answer holds the token:\n{raw}");
    gw.stop().await;
}
