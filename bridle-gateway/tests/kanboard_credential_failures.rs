//! What an agent is told when its Kanboard credential cannot be had, against the wire-faithful
//! Kanboard stand-in on 127.0.0.1: a secret source that fails (a database that is locked or
//! gone) is a retryable failure of the gateway, not a missing configuration, and a secret
//! revoked as the call records its use is a gone credential. In every case nothing reaches
//! Kanboard.

#![cfg(feature = "kanboard")]
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use bridle_gateway::kanboard::{
    self, BridleProject, KanboardClient, KanboardConfig, KanboardTools, VaultAccess,
};
use bridle_gateway::upstreams::{Credential, SecretError, SecretSource, SecretUse};
use kberg_core::{CallOptions, Caller, Principal, ToolOutput, ToolRegistry};
use serde_json::{Value, json};
use support::kanboard_standin::KanboardStandIn;

/// How [`Source`] answers.
const WORKS: u8 = 0;
/// Reading the value fails (the vault's database cannot be read).
const READ_FAILS: u8 = 1;
/// Recording the use fails (the vault's database is locked).
const RECORD_FAILS: u8 = 2;
/// The value is read, and revoked before its use is recorded.
const REVOKED_AT_USE: u8 = 3;

/// A secret source of one secret, which fails as told.
struct Source(AtomicU8);

impl SecretSource for Source {
    fn version(&self, _name: &str) -> Result<u64, SecretError> {
        Ok(1)
    }
    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        match self.0.load(Ordering::SeqCst) {
            READ_FAILS => Err(SecretError::Unreadable {
                name: name.into(),
                message: "the database cannot be read".into(),
            }),
            _ => Ok((Credential::new("claude-kb-token"), 1)),
        }
    }
    fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
        match self.0.load(Ordering::SeqCst) {
            RECORD_FAILS => Err(SecretError::Unreadable {
                name: used.name.into(),
                message: "database is locked".into(),
            }),
            REVOKED_AT_USE => Err(SecretError::Missing {
                name: used.name.into(),
            }),
            _ => Ok(()),
        }
    }
    fn blocks(&self, _name: &str) -> bool {
        false
    }
}

/// The refusal's `code` and `retryable`.
fn refusal(out: &ToolOutput) -> (String, Value) {
    assert!(out.is_error, "{}", out.all_text());
    let s = out.structured.as_ref().unwrap();
    (
        s["code"].as_str().unwrap().to_string(),
        s["retryable"].clone(),
    )
}

#[tokio::test]
async fn a_failing_secret_source_is_retryable_and_a_revoked_secret_is_gone() {
    let kb = KanboardStandIn::start().await;
    let claude = kb.add_user("claude-bot", "claude-kb-token");
    let shop = kb.add_project("Shop", &[1, claude]);
    let config: KanboardConfig = serde_saphyr::from_str(&format!(
        "url: '{}'\nagents:\n  claude: {{secret: kanboard-claude, user: claude-bot}}\nprojects:\n  demo: [{shop}]\n",
        kb.endpoint
    ))
    .unwrap();
    let source = Arc::new(Source(AtomicU8::new(WORKS)));
    let access = VaultAccess::new(
        config,
        Arc::clone(&source) as Arc<dyn SecretSource>,
        Arc::new(|_c: &Caller| vec![BridleProject::writable("demo")]),
    );
    let client =
        KanboardClient::new(kb.endpoint.parse().unwrap(), Duration::from_secs(10)).unwrap();
    let tools = ToolRegistry::new();
    kanboard::register(&tools, KanboardTools::new(client, Arc::new(access))).unwrap();
    let call = |who: &'static str| {
        let tools = tools.clone();
        async move {
            tools
                .call(
                    &Caller::new(Principal::new(who)),
                    "list_projects",
                    json!({}),
                    CallOptions::default(),
                )
                .await
                .unwrap()
        }
    };

    let out = call("claude").await;
    assert!(!out.is_error, "{}", out.all_text());
    let sent = kb.log().len();

    for (mode, code, retryable) in [
        (READ_FAILS, "kanboard_credential_unavailable", true),
        (RECORD_FAILS, "kanboard_credential_unavailable", true),
        (REVOKED_AT_USE, "credential_missing", false),
    ] {
        source.0.store(mode, Ordering::SeqCst);
        let out = call("claude").await;
        assert_eq!(
            refusal(&out),
            (code.to_string(), json!(retryable)),
            "mode {mode}: {}",
            out.all_text()
        );
        assert!(
            out.all_text().contains("nothing was sent"),
            "{}",
            out.all_text()
        );
        assert!(
            !out.all_text().contains("claude-kb-token"),
            "{}",
            out.all_text()
        );
        assert_eq!(
            kb.log().len(),
            sent,
            "mode {mode}: a request reached Kanboard"
        );
    }

    // An agent without a Kanboard credential is still told so, and a source that works again
    // serves the next call.
    assert_eq!(
        refusal(&call("stranger").await),
        ("kanboard_not_configured".to_string(), json!(false))
    );
    source.0.store(WORKS, Ordering::SeqCst);
    let out = call("claude").await;
    assert!(!out.is_error, "{}", out.all_text());
}
