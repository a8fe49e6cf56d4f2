//! An upstream disabled while a call to it is on its way: the call had passed the front tool's
//! check of the switch and was still looking up its agent's secret when the operator's
//! `POST /integrations/{ns}/disable` answered. Disabling closes the upstream's connections; the
//! late call must not open a new one (for a stdio upstream, a child process that would live on
//! while the upstream is off) nor reach the upstream: it is refused `upstream_disabled`.
//!
//! The secret source holds the lookup of codex's secret until the disable has answered, so the
//! order is fixed by signals, not by timing. The upstream is a stand-in on 127.0.0.1 that
//! records the credential of every request it gets.
//!
//! Likewise a connection whose secret is gone (revoked, deleted) is closed by the call that
//! finds it gone, not kept open with the credential that no longer holds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::{Arc, Mutex, mpsc};

use admin_support::gateway::Gw;
use admin_support::upstream::{Seen, serve_stand_in};
use bridle_gateway::upstreams::{Credential, FolderSecrets, SecretError, SecretSource, SecretUse};
use bridle_rules::ReadWrite;
use kberg_testkit::eventually_async_ok;
use serde_json::{Value, json};

/// A folder of secrets whose first lookup of `up-codex` says so and waits to be released.
struct Gated {
    folder: FolderSecrets,
    entered: Mutex<Option<mpsc::Sender<()>>>,
    release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl SecretSource for Gated {
    fn version(&self, name: &str) -> Result<u64, SecretError> {
        if name == "up-codex"
            && let Some(entered) = self.entered.lock().unwrap().take()
        {
            entered.send(()).unwrap();
            let release = self.release.lock().unwrap().take().unwrap();
            release.recv().unwrap();
        }
        self.folder.version(name)
    }

    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        self.folder.current(name)
    }

    fn record_use(&self, _used: &SecretUse<'_>) -> Result<(), SecretError> {
        Ok(())
    }
}

async fn call(http: &reqwest::Client, mcp: &str, token: &str, tool: &str) -> Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let method = if tool.is_empty() {
        json!({"method": "tools/list", "params": {"_meta": meta}})
    } else {
        json!({"method": "tools/call", "params": {"name": tool, "arguments": {}, "_meta": meta}})
    };
    let mut body = json!({"jsonrpc": "2.0", "id": 7});
    body.as_object_mut()
        .unwrap()
        .extend(method.as_object().unwrap().clone());
    let r = http
        .post(mcp)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap())
        .header("mcp-name", tool)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_its_upstream_is_disabled_opens_no_connection() {
    let seen: Seen = Arc::default();
    let addr = serve_stand_in(Arc::clone(&seen)).await;

    let secrets = tempfile::tempdir().unwrap();
    for (name, value) in [("up-claude", "claude-secret"), ("up-codex", "codex-secret")] {
        std::fs::write(secrets.path().join(name), format!("{value}\n")).unwrap();
    }
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let source = Arc::new(Gated {
        folder: FolderSecrets::new(secrets.path()),
        entered: Mutex::new(Some(entered_tx)),
        release: Mutex::new(Some(release_rx)),
    });
    let yaml = format!(
        "upstreams:\n  up:\n    http: {{url: 'http://{addr}/mcp'}}\n    credential:\n      per_agent: {{claude: up-claude, codex: up-codex}}\n      format: 'token {{secret}}'\n"
    );
    let gw = Gw::start_with_yaml(&yaml, |b| b.secrets(source)).await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    for agent in ["claude", "codex"] {
        doc.permissions.get_mut(agent).unwrap().tools.insert(
            "up".into(),
            ReadWrite {
                read: true,
                write: false,
            },
        );
    }
    gw.ctx
        .store
        .save_edit("demo", &doc, revision, "test", "claude and codex read up")
        .unwrap();
    let codex = gw.file_token("codex");
    eventually_async_ok("the upstream's tool offered to codex", || async {
        let listed = call(&gw.http, &gw.mcp, &codex, "").await;
        if listed.to_string().contains("up__ping") {
            Ok(())
        } else {
            Err(listed.to_string())
        }
    })
    .await;

    // codex's first call: past the switch, held at the lookup of its own secret.
    let (http, mcp) = (gw.http.clone(), gw.mcp.clone());
    let in_flight = tokio::spawn(async move { call(&http, &mcp, &codex, "up__ping").await });
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    let r = gw.post("/integrations/up/disable").send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    release.send(()).unwrap();

    let answer = in_flight.await.unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["code"], "upstream_disabled",
        "{answer}"
    );
    let codex_requests: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(auth, _)| auth.contains("codex-secret"))
        .map(|(_, method)| method.clone())
        .collect();
    assert!(
        codex_requests.is_empty(),
        "the disabled upstream was reached with codex's credential: {codex_requests:?}"
    );
    gw.stop().await;
}

/// The connected upstreams the admin API reports, by namespace.
async fn connected(gw: &Gw) -> Value {
    let list: Value = gw
        .get("/integrations")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["namespace"].as_str().unwrap().to_string(),
                i["connected"].clone(),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_secret_is_gone_is_closed() {
    let seen: Seen = Arc::default();
    let addr = serve_stand_in(Arc::clone(&seen)).await;

    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("up-token"), "shared-secret\n").unwrap();
    let folder = Arc::new(FolderSecrets::new(secrets.path()));
    let yaml = format!(
        "upstreams:\n  up:\n    http: {{url: 'http://{addr}/mcp'}}\n    credential: {{secret: up-token, format: 'token {{secret}}'}}\n"
    );
    let gw = Gw::start_with_yaml(&yaml, |b| b.secrets(folder)).await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "up".into(),
        ReadWrite {
            read: true,
            write: false,
        },
    );
    gw.ctx
        .store
        .save_edit("demo", &doc, revision, "test", "claude reads up")
        .unwrap();
    let claude = gw.file_token("claude");
    let answer = eventually_async_ok("claude's call answered by the upstream", || async {
        let answer = call(&gw.http, &gw.mcp, &claude, "up__ping").await;
        if answer["result"]["content"][0]["text"] == "pong" {
            Ok(answer)
        } else {
            Err(answer.to_string())
        }
    })
    .await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(connected(&gw).await["up"], true);

    // The secret is deleted: the next call is refused, and the connection that carried it is
    // closed.
    std::fs::remove_file(secrets.path().join("up-token")).unwrap();
    let answer = call(&gw.http, &gw.mcp, &claude, "up__ping").await;
    assert_eq!(
        answer["result"]["structuredContent"]["code"], "credential_missing",
        "{answer}"
    );
    assert_eq!(
        connected(&gw).await["up"],
        false,
        "the connection with the deleted secret is still open"
    );
    gw.stop().await;
}
