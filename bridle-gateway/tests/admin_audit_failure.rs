//! The admin API when the audit log cannot be written (a full disk, a damaged table): every
//! change is committed to its own store first, so it stands, and the answer says so: 500
//! `audit_unavailable` naming the change as made, or, for a token, the token itself (it cannot
//! be shown again) with a warning. Nothing secret reaches an answer or the log; the failed
//! entries leave no trace in the chain, and once the log is repaired the next change is recorded
//! and the chain verifies.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;
#[path = "common/audit_fault.rs"]
mod audit_fault;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use bridle_rules::{ChangeRequest, Origin, ProposalStatus, Severity};
use kberg_testkit::log::LogBuffer;
use reqwest::StatusCode;
use serde_json::json;

const CANARY: &str = "canary-audit-failure-value-4b8e21";
const ROTATED: &str = "canary-audit-failure-rotated-93ad70";

/// Checks a 500 `audit_unavailable` that names `what` as made, and that `secrets` are not in
/// it.
async fn unrecorded(resp: reqwest::Response, what: &str, secrets: &[&str]) {
    let body = problem(resp, StatusCode::INTERNAL_SERVER_ERROR, "audit_unavailable").await;
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "{what} was made, but the audit log could not record it"
        )),
        "{detail}"
    );
    for s in secrets {
        assert!(!body.to_string().contains(s), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_stand_and_say_so_when_the_audit_log_cannot_record_them() {
    let logs = LogBuffer::default();
    tracing::subscriber::set_global_default(logs.subscriber(tracing::Level::TRACE))
        .expect("the only subscriber of this test binary");
    let gw = Gw::start().await;
    let recorded_before =
        json_ok(gw.get("/audit").send().await.unwrap(), StatusCode::OK).await["items"]
            .as_array()
            .unwrap()
            .len();
    audit_fault::break_audit(gw.tmp.path());

    // A secret: created and rotated in the vault, each answered as made but unrecorded.
    let resp = gw
        .post("/secrets")
        .json(&json!({"name": "gitea.token", "value": CANARY}))
        .send()
        .await
        .unwrap();
    unrecorded(resp, "the secret", &[CANARY]).await;
    let resp = gw
        .post("/secrets/gitea.token/rotate")
        .json(&json!({"value": ROTATED, "grace_secs": 60}))
        .send()
        .await
        .unwrap();
    unrecorded(resp, "the rotation", &[CANARY, ROTATED]).await;
    let secret = json_ok(
        gw.get("/secrets/gitea.token").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(secret["active_version"], 2, "{secret}");
    let active = gw
        .vault
        .resolve(&bridle_gateway::vault::SecretRef::Vault(
            "gitea.token".into(),
        ))
        .unwrap();
    assert_eq!(active.version, Some(2));
    assert_eq!(active.value.expose_str().unwrap(), ROTATED);

    // A decision of the review queue: the guardrail is in the document.
    let revision = gw.ctx.store.load("demo").unwrap().document.revision;
    let id = gw
        .ctx
        .store
        .propose(
            "demo",
            &Origin::agent("claude", Some("sess-1".into())),
            &ChangeRequest::Guardrail {
                id: "no-force-push".into(),
                statement: "Never force-push a shared branch.".into(),
                severity: Severity::HardInstruction,
                applies_to: vec!["all_agents".into()],
            },
            None,
        )
        .unwrap()
        .id;
    let resp = gw
        .post(&format!("/queue/{id}/approve"))
        .send()
        .await
        .unwrap();
    unrecorded(resp, "the approval", &[]).await;
    assert_eq!(
        gw.ctx.store.proposal(id).unwrap().status,
        ProposalStatus::Approved
    );
    let doc = gw.ctx.store.load("demo").unwrap().document;
    assert_eq!(doc.revision, revision + 1);

    // A token is issued all the same, with a warning: refusing it would lose its only copy.
    let issued = json_ok(
        gw.post("/agents/bot/token").send().await.unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let token = issued["token"].as_str().unwrap().to_string();
    let warning = issued["warning"].as_str().expect("a warning").to_string();
    assert!(
        warning.starts_with("the token was made, but the audit log could not record it"),
        "{warning}"
    );
    assert!(!warning.contains(&token));
    assert!(gw.mcp_works(&token).await, "the issued token works");
    let rotated = json_ok(
        gw.post("/agents/bot/rotate")
            .json(&json!({"grace_secs": 0}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let second = rotated["token"].as_str().unwrap().to_string();
    assert!(rotated["warning"].as_str().is_some(), "{rotated}");
    assert!(gw.mcp_works(&second).await);
    assert!(!gw.mcp_works(&token).await, "the first token ended");

    // Nothing of the failed changes is in the chain: the log still holds what it held.
    audit_fault::repair_audit(gw.tmp.path());
    let page = json_ok(gw.get("/audit").send().await.unwrap(), StatusCode::OK).await;
    let items = page["items"].as_array().unwrap();
    // Tool calls of the MCP checks above are recorded by the batching writer, which failed
    // while the table was broken and reports the loss; no admin change is among the entries.
    assert!(
        items.iter().all(|e| e["source"]["type"] != "user"),
        "{recorded_before} entries before: {page}"
    );

    // Repaired, the next change is recorded and the chain verifies.
    let resp = gw
        .post("/secrets/gitea.token/versions/1/revoke")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "{}",
        resp.text().await.unwrap()
    );
    assert_eq!(gw.audit_kinds("?source=user").await, ["secret_revoke"]);
    let verify = json_ok(
        gw.get("/audit/verify").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(verify["intact"], true, "{verify}");

    // The log says what was lost, and holds no value.
    let text = logs.text();
    assert!(
        text.contains("an audit entry could not be written"),
        "the failure is in the log"
    );
    assert!(text.contains("a token was issued but the audit log could not record it"));
    for secret in [CANARY, ROTATED, token.as_str(), second.as_str()] {
        assert!(!text.contains(secret), "a secret value reached the log");
    }
    let export = gw.audit_export().await;
    for secret in [CANARY, ROTATED, token.as_str(), second.as_str()] {
        assert!(
            !export.contains(secret),
            "a secret value reached the audit log"
        );
    }
    gw.stop().await;
}
