//! The secrets resource over real HTTP: create, list and get metadata, rotate, revoke; a
//! canary value is never in any answer, problem detail, audit entry or export; admin
//! credentials in the vault are out of reach; every failure path has its problem details.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use reqwest::StatusCode;
use serde_json::json;

const CANARY: &str = "canary-7f3a9c1e-do-not-leak";
const CANARY_2: &str = "canary-2-b81d44aa-do-not-leak";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_created_listed_rotated_and_revoked_without_their_values() {
    let gw = Gw::start().await;
    let mut seen = String::new();

    let resp = gw
        .post("/secrets")
        .json(&json!({"name": "gitea-token", "value": CANARY}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let text = resp.text().await.unwrap();
    seen.push_str(&text);
    let created: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(created["name"], "gitea-token");
    assert_eq!(created["active_version"], 1);
    assert_eq!(created["created_by"], "admin:alice@api");
    let fp1 = created["versions"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(fp1.len(), 16);

    // The gateway can use it: the vault holds the value.
    assert_eq!(
        gw.vault
            .current("gitea-token")
            .unwrap()
            .value
            .expose_str()
            .unwrap(),
        CANARY
    );

    let list = gw
        .get("/secrets")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    seen.push_str(&list);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let one = gw
        .get("/secrets/gitea-token")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    seen.push_str(&one);

    let rotated = gw
        .post("/secrets/gitea-token/rotate")
        .header("bridle-surface", "cli")
        .json(&json!({"value": CANARY_2, "grace_secs": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status(), StatusCode::OK);
    let text = rotated.text().await.unwrap();
    seen.push_str(&text);
    let rotated: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(rotated["active_version"], 2);
    assert_eq!(rotated["versions"][0]["state"]["state"], "grace");
    assert_eq!(rotated["versions"][1]["created_by"], "admin:alice@cli");

    let revoked = gw
        .post("/secrets/gitea-token/versions/1/revoke")
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    let text = revoked.text().await.unwrap();
    seen.push_str(&text);
    let revoked: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(revoked["versions"][0]["state"]["state"], "revoked");
    seen.push_str(
        &problem(
            gw.post("/secrets/gitea-token/versions/1/revoke")
                .send()
                .await
                .unwrap(),
            StatusCode::CONFLICT,
            "version_revoked",
        )
        .await
        .to_string(),
    );
    seen.push_str(
        &problem(
            gw.post("/secrets")
                .json(&json!({"name": "gitea-token", "value": CANARY}))
                .send()
                .await
                .unwrap(),
            StatusCode::CONFLICT,
            "secret_exists",
        )
        .await
        .to_string(),
    );

    // The audit log: create, rotate (through the cli surface), revoke, by alice; no value.
    let audit = json_ok(
        gw.get("/audit?source=user&actor=alice")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let got: Vec<(String, String)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["source"]["surface"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("secret_create".to_string(), "api".to_string()),
            ("secret_rotate".to_string(), "cli".to_string()),
            ("secret_revoke".to_string(), "api".to_string()),
        ]
    );
    assert_eq!(audit["items"][0]["change"]["digest"], fp1);
    let export = gw
        .get("/audit/export")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    seen.push_str(&export);
    for canary in [CANARY, CANARY_2] {
        assert!(!seen.contains(canary), "a secret value was returned");
    }
    // Nor is it in the audit database file.
    bridle_gateway_flush(&gw);
    for file in ["audit.db", "audit.db-wal"] {
        let path = gw.tmp.path().join(file);
        if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(CANARY) && !text.contains(CANARY_2), "{file}");
        }
    }
    gw.stop().await;
}

fn bridle_gateway_flush(gw: &Gw) {
    gw.ctx.audit().unwrap().flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secrets_resource_refuses_what_it_must() {
    let gw = Gw::start().await;
    // The admin credential secret is out of reach of this resource.
    gw.vault
        .create(
            "admin-token.ops",
            &bridle_gateway::vault::SecretValue::new(b"bda_x".to_vec()),
            "test",
        )
        .unwrap();
    let list = json_ok(gw.get("/secrets").send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(list["items"], json!([]));
    for req in [
        gw.get("/secrets/admin-token.ops"),
        gw.post("/secrets/admin-token.ops/rotate")
            .json(&json!({"value": "x"})),
        gw.post("/secrets/admin-token.ops/versions/1/revoke"),
    ] {
        problem(
            req.send().await.unwrap(),
            StatusCode::NOT_FOUND,
            "unknown_secret",
        )
        .await;
    }
    problem(
        gw.post("/secrets")
            .json(&json!({"name": "admin-token.me", "value": "x"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "reserved_name",
    )
    .await;
    // Unknown names and versions.
    problem(
        gw.get("/secrets/nope").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_secret",
    )
    .await;
    problem(
        gw.post("/secrets/nope/rotate")
            .json(&json!({"value": "x"}))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_secret",
    )
    .await;
    gw.post("/secrets")
        .json(&json!({"name": "s1", "value": "v"}))
        .send()
        .await
        .unwrap();
    problem(
        gw.post("/secrets/s1/versions/9/revoke")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_version",
    )
    .await;
    problem(
        gw.post("/secrets/s1/versions/one/revoke")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    // Invalid names and values.
    for (body, code) in [
        (json!({"name": "../etc", "value": "x"}), "invalid_name"),
        (json!({"name": "", "value": "x"}), "invalid_name"),
        (json!({"name": "empty", "value": ""}), "invalid_value"),
        (json!({"name": "n", "value": 5}), "invalid_request"),
        (json!({"name": "n"}), "invalid_request"),
        (
            json!({"name": "n", "value": "x", "extra": true}),
            "invalid_request",
        ),
    ] {
        let resp = gw.post("/secrets").json(&body).send().await.unwrap();
        let p = problem(resp, StatusCode::UNPROCESSABLE_ENTITY, code).await;
        assert!(!p.to_string().contains("\"x\""), "{p}");
    }
    problem(
        gw.post("/secrets")
            .header("content-type", "application/json")
            .body("{\"name\": \"n\", \"value\": \"unterminated")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    let too_large = gw
        .post("/secrets")
        .header("content-type", "application/json")
        .body(format!(
            "{{\"name\": \"big\", \"value\": \"{}\"}}",
            "v".repeat(2 << 20)
        ))
        .send()
        .await
        .unwrap();
    // The unread rest of the body ends the connection; the client is told not to reuse it.
    assert_eq!(too_large.headers()["connection"], "close");
    problem(too_large, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large").await;
    problem(
        gw.post("/secrets")
            .body("name=n&value=v")
            .send()
            .await
            .unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    problem(
        gw.http
            .delete(gw.url("/secrets/s1"))
            .bearer_auth(admin_support::ALICE)
            .send()
            .await
            .unwrap(),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_rotations_are_each_audited_from_the_version_they_replaced() {
    let gw = Gw::start().await;
    json_ok(
        gw.post("/secrets")
            .json(&json!({"name": "raced", "value": "v1"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    const ROTATIONS: u64 = 12;
    let answers = futures::future::join_all((0..ROTATIONS).map(|i| {
        gw.post("/secrets/raced/rotate")
            .json(&json!({"value": format!("v-{i}")}))
            .send()
    }))
    .await;
    for answer in answers {
        assert_eq!(answer.unwrap().status(), StatusCode::OK);
    }
    let audit = json_ok(
        gw.get("/audit?kind=secret_rotate&limit=100")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let mut changes: Vec<(u64, u64)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let n = |k: &str| e["change"][k].as_str().unwrap().parse::<u64>().unwrap();
            (n("before"), n("after"))
        })
        .collect();
    changes.sort_unstable();
    // Each rotation replaced the version just before its own, whatever ran beside it.
    let expected: Vec<(u64, u64)> = (1..=ROTATIONS).map(|v| (v, v + 1)).collect();
    assert_eq!(changes, expected);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_secret_cannot_be_read_back_is_still_audited() {
    let gw = Gw::start().await;
    // Every version written from now on reads back as a row the vault cannot decode, so a
    // create or a rotation is made and then fails its read-back.
    rusqlite::Connection::open(gw.tmp.path().join("vault.db"))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER unreadable AFTER INSERT ON vault_versions BEGIN
               UPDATE vault_versions SET created_at = 'not a time'
               WHERE name = NEW.name AND version = NEW.version;
             END;",
        )
        .unwrap();
    let resp = gw
        .post("/secrets")
        .json(&json!({"name": "gitea-token", "value": CANARY}))
        .send()
        .await
        .unwrap();
    let body = problem(resp, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("`gitea-token` was created, but reading it back failed"),
        "{body}"
    );
    assert!(!body.to_string().contains(CANARY), "{body}");

    // The change was made, and the audit log has it.
    let audit = json_ok(
        gw.get("/audit?kind=secret_create").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = audit["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{audit}");
    assert_eq!(items[0]["subject"], "gitea-token v1", "{audit}");
    assert!(!audit.to_string().contains(CANARY));
}
