//! The grace period of a rotation through the admin API is capped at 30 days: a secret's or an
//! agent's `grace_secs` above it is 422 `invalid_request` naming the field and the cap, and
//! nothing rotates (`u64::MAX` kept the old credential valid for good and showed it valid until
//! 1970); 30 days exactly is taken.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use bridle_gateway::admin::MAX_GRACE_SECS;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn names_the_field_and_the_cap(body: &Value) {
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains(&MAX_GRACE_SECS.to_string()),
        "{body}"
    );
    assert_eq!(body["errors"][0]["field"], "grace_secs", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_grace_period_is_at_most_30_days() {
    assert_eq!(MAX_GRACE_SECS, 30 * 24 * 60 * 60);
    let gw = Gw::start().await;
    json_ok(
        gw.post("/secrets")
            .json(&json!({"name": "gitea-token", "value": "first"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    for grace in [u64::MAX, MAX_GRACE_SECS + 1] {
        let resp = gw
            .post("/secrets/gitea-token/rotate")
            .json(&json!({"value": "second", "grace_secs": grace}))
            .send()
            .await
            .unwrap();
        let body = problem(resp, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request").await;
        names_the_field_and_the_cap(&body);
        assert!(!body.to_string().contains("second"), "no value in {body}");
    }
    assert_eq!(gw.vault.active_version("gitea-token").unwrap(), 1);
    let rotated = json_ok(
        gw.post("/secrets/gitea-token/rotate")
            .json(&json!({"value": "second", "grace_secs": MAX_GRACE_SECS}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(rotated["active_version"], 2);
    assert_eq!(rotated["versions"][0]["state"]["state"], "grace");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_tokens_grace_period_is_at_most_30_days() {
    let gw = Gw::start().await;
    json_ok(
        gw.post("/agents/bot/token").send().await.unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let before = gw.vault.agent_tokens("bot").unwrap();
    for grace in [u64::MAX, MAX_GRACE_SECS + 1] {
        let resp = gw
            .post("/agents/bot/rotate")
            .json(&json!({"grace_secs": grace}))
            .send()
            .await
            .unwrap();
        let body = problem(resp, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request").await;
        names_the_field_and_the_cap(&body);
    }
    assert_eq!(
        gw.vault.agent_tokens("bot").unwrap().len(),
        before.len(),
        "nothing was issued"
    );
    let rotated = json_ok(
        gw.post("/agents/bot/rotate")
            .json(&json!({"grace_secs": MAX_GRACE_SECS}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(rotated["token"].as_str().is_some());
    let tokens = gw.vault.agent_tokens("bot").unwrap();
    let previous = tokens
        .iter()
        .find(|t| t.version + 1 == rotated["version"].as_u64().unwrap())
        .unwrap();
    let until = previous.valid_until.expect("in its grace period");
    let days = (until - chrono::Utc::now()).num_days();
    assert!((29..=30).contains(&days), "valid for {days} days");
    gw.stop().await;
}
