//! A forwarded call whose credential is revoked, or rotated out with no grace, between the
//! moment its connection was found current and the moment its use is recorded: the vault
//! refuses to record the use (the request is then not sent), and the agent is told the
//! credential is gone (`credential_missing`, as when it was revoked before the call started),
//! not that the gateway failed (`internal`, retryable). A source that genuinely fails to
//! record a use still answers `internal`.
//!
//! The secret source is the vault itself, wrapped so that the next recorded use of a forwarded
//! call first revokes (or rotates) the version it is about to record: the order is fixed by
//! the wrapper, not by timing. The upstream is a stand-in on 127.0.0.1 that records the
//! credential of every request it gets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::upstream::{Seen, serve_stand_in};
use bridle_gateway::upstreams::{Credential, SecretError, SecretSource, SecretUse};
use bridle_gateway::vault::{MasterKey, Vault, VaultConfig};
use bridle_rules::ReadWrite;
use kberg_testkit::eventually_async_ok;
use serde_json::{Value, json};

/// What the wrapper does to the next use of a forwarded call before recording it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Records it as it comes.
    Record,
    /// Revokes the version first.
    Revoke,
    /// Rotates the secret first, with no grace for the version in use.
    Rotate,
    /// Fails as a database that cannot be written would.
    Fail,
}

/// The vault, with a hook on the next recorded use of a forwarded call (not a `connect`).
struct Racing {
    vault: Arc<Vault>,
    next: Mutex<Next>,
}

impl SecretSource for Racing {
    fn version(&self, name: &str) -> Result<u64, SecretError> {
        SecretSource::version(self.vault.as_ref(), name)
    }

    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        SecretSource::current(self.vault.as_ref(), name)
    }

    fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
        let next = if used.request == "connect" {
            Next::Record
        } else {
            std::mem::replace(&mut *self.next.lock().unwrap(), Next::Record)
        };
        match next {
            Next::Record => {}
            Next::Revoke => self.vault.revoke(used.name, used.version, "admin").unwrap(),
            Next::Rotate => {
                self.vault
                    .rotate(used.name, &"tok-2".into(), "admin", Duration::ZERO)
                    .unwrap();
            }
            Next::Fail => {
                return Err(SecretError::Unreadable {
                    name: used.name.to_owned(),
                    message: "vault_database: the disk is full".to_owned(),
                });
            }
        }
        SecretSource::record_use(self.vault.as_ref(), used)
    }
}

async fn call(http: &reqwest::Client, mcp: &str, token: &str, tool: &str) -> Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let body = json!({
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta},
    });
    let r = http
        .post(mcp)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    r.json().await.unwrap()
}

/// A gateway whose `up` upstream takes its credential from `source`'s vault secret
/// `up-token`, readable by claude; answers once claude's first call went through.
async fn gateway(source: Arc<Racing>, addr: std::net::SocketAddr) -> (Gw, String) {
    let yaml = format!(
        "upstreams:\n  up:\n    http: {{url: 'http://{addr}/mcp'}}\n    credential: {{secret: up-token, format: 'token {{secret}}'}}\n"
    );
    let gw = Gw::start_with_yaml(&yaml, |b| b.secrets(source)).await;
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
    eventually_async_ok("claude's call answered by the upstream", || async {
        let answer = call(&gw.http, &gw.mcp, &claude, "up__ping").await;
        if answer["result"]["content"][0]["text"] == "pong" {
            Ok(())
        } else {
            Err(answer.to_string())
        }
    })
    .await;
    (gw, claude)
}

fn racing(dir: &std::path::Path) -> Arc<Racing> {
    let vault = Vault::open(
        &dir.join("vault.db"),
        &MasterKey::from_bytes([9; 32]),
        VaultConfig::default(),
    )
    .unwrap();
    vault.create("up-token", &"tok-1".into(), "admin").unwrap();
    Arc::new(Racing {
        vault: Arc::new(vault),
        next: Mutex::new(Next::Record),
    })
}

/// The `tools/call` requests the stand-in got with `credential`.
fn calls_with(seen: &Seen, credential: &str) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(auth, method)| auth == &format!("token {credential}") && method == "tools/call")
        .count()
}

/// Before, both answered `internal` ("could not record the use"), retryable, as if the
/// gateway had failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_racing_a_revoke_or_a_rotation_is_told_its_credential_is_gone() {
    let seen: Seen = Arc::default();
    let addr = serve_stand_in(Arc::clone(&seen)).await;
    let dir = tempfile::tempdir().unwrap();
    let source = racing(dir.path());
    let (gw, claude) = gateway(Arc::clone(&source), addr).await;
    let sent = calls_with(&seen, "tok-1");

    for (race, credential) in [(Next::Rotate, "tok-1"), (Next::Revoke, "tok-2")] {
        *source.next.lock().unwrap() = race;
        let answer = call(&gw.http, &gw.mcp, &claude, "up__ping").await;
        let refusal = &answer["result"]["structuredContent"];
        assert_eq!(refusal["code"], "credential_missing", "{race:?}: {answer}");
        assert_eq!(refusal["retryable"], false, "{race:?}: {answer}");
        assert_eq!(refusal["tool"], "up__ping", "{race:?}: {answer}");
        assert_eq!(
            *source.next.lock().unwrap(),
            Next::Record,
            "{race:?}: the hook ran"
        );
        if race == Next::Rotate {
            assert_eq!(
                calls_with(&seen, "tok-1"),
                sent,
                "a call went out with the version rotated out"
            );
            // The next call goes out with the new version.
            let answer = call(&gw.http, &gw.mcp, &claude, "up__ping").await;
            assert_eq!(answer["result"]["content"][0]["text"], "pong", "{answer}");
            assert_eq!(calls_with(&seen, "tok-2"), 1);
        } else {
            assert_eq!(
                calls_with(&seen, credential),
                1,
                "a call went out with the revoked version"
            );
        }
    }
    gw.stop().await;
}

/// A use that could not be recorded for any other reason is still the gateway's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_use_that_cannot_be_recorded_is_still_internal() {
    let seen: Seen = Arc::default();
    let addr = serve_stand_in(Arc::clone(&seen)).await;
    let dir = tempfile::tempdir().unwrap();
    let source = racing(dir.path());
    let (gw, claude) = gateway(Arc::clone(&source), addr).await;
    let sent = calls_with(&seen, "tok-1");

    *source.next.lock().unwrap() = Next::Fail;
    let answer = call(&gw.http, &gw.mcp, &claude, "up__ping").await;
    let refusal = &answer["result"]["structuredContent"];
    assert_eq!(refusal["code"], "internal", "{answer}");
    assert_eq!(refusal["retryable"], true, "{answer}");
    assert_eq!(calls_with(&seen, "tok-1"), sent, "the call went out");
    gw.stop().await;
}
