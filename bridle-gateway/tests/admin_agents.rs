//! The agents resource over real HTTP: list and get, vault tokens issued once, rotated and
//! revoked (the MCP endpoint honours each change on the next request), and every failure path:
//! no or wrong credential, an agent's token, unknown agents, a secret-file agent, malformed
//! JSON, wrong types, an oversize body.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use kberg_agent::{McpSurface, ToolSurface};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_listed_and_their_vault_tokens_issued_rotated_and_revoked() {
    let gw = Gw::start().await;

    let page = json_ok(gw.get("/agents").send().await.unwrap(), StatusCode::OK).await;
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bot", "claude", "codex", "gemini"]);
    let page = json_ok(
        gw.get("/agents?type=claude&limit=1").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(page["items"][0]["name"], "bot");
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let next = json_ok(
        gw.get(&format!("/agents?type=claude&limit=1&cursor={cursor}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(next["items"][0]["name"], "claude");
    assert!(next.get("next_cursor").is_none());

    let bot = json_ok(gw.get("/agents/bot").send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(bot["agent_type"], "claude");
    assert_eq!(bot["token_source"], "vault");
    assert_eq!(bot["projects"], json!(["demo"]));
    assert_eq!(bot["token_versions"], json!([]));

    // Issued: shown once, it opens the MCP endpoint.
    let issued = json_ok(
        gw.post("/agents/bot/token").send().await.unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let t1 = issued["token"].as_str().unwrap().to_string();
    assert!(t1.starts_with("bdl_"));
    assert!(gw.mcp_works(&t1).await);
    let bot = gw.get("/agents/bot").send().await.unwrap();
    let text = bot.text().await.unwrap();
    assert!(!text.contains(&t1), "the token is never shown again");
    let bot: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(bot["token_versions"][0]["valid"], true);
    assert_eq!(bot["calls_made"], 1);

    // Rotated without grace: the new one works, the old one no longer.
    let rotated = json_ok(
        gw.post("/agents/bot/rotate")
            .json(&json!({"grace_secs": 0}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let t2 = rotated["token"].as_str().unwrap().to_string();
    assert_eq!(rotated["version"], 2);
    assert!(gw.mcp_works(&t2).await);
    assert!(!gw.mcp_works(&t1).await);
    // With a grace period (and no body at all, the default is 0).
    let r3 = json_ok(
        gw.post("/agents/bot/rotate")
            .json(&json!({"grace_secs": 3600}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let t3 = r3["token"].as_str().unwrap().to_string();
    assert!(gw.mcp_works(&t2).await, "in grace");
    assert!(gw.mcp_works(&t3).await);

    // Revoked: every token at once, and its live sessions end.
    let live = McpSurface::connect_http_with_bearer(&gw.mcp, &t3)
        .await
        .unwrap();
    assert!(
        !live
            .call("list_projects", json!({}), CancellationToken::new())
            .await
            .unwrap()
            .is_error
    );
    let revoked = json_ok(
        gw.post("/agents/bot/revoke").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(revoked["revoked_tokens"], 2);
    assert!(revoked["ended_sessions"].as_u64().unwrap() >= 1);
    assert!(!gw.mcp_works(&t2).await);
    assert!(!gw.mcp_works(&t3).await);
    match live
        .call("list_projects", json!({}), CancellationToken::new())
        .await
    {
        Err(_) => {}
        Ok(r) => assert!(r.is_error, "a revoked agent's session still served: {r:?}"),
    }

    // Every change is in the audit log as alice through the API, about bot.
    let audit = json_ok(
        gw.get("/audit?agent=bot&source=user").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let kinds: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "agent_rotate",
            "agent_rotate",
            "agent_rotate",
            "agent_revoke"
        ]
    );
    for e in audit["items"].as_array().unwrap() {
        assert_eq!(e["source"]["admin"], "alice");
        assert_eq!(e["source"]["surface"], "api");
    }
    let export = gw.get("/audit/export").send().await.unwrap();
    let export = export.text().await.unwrap();
    for t in [&t1, &t2, &t3] {
        assert!(
            !export.contains(t.as_str()),
            "a token reached the audit log"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_resource_refuses_what_it_must() {
    let gw = Gw::start().await;
    // No credential, a wrong one, every agent's token: 401 on reads and changes.
    let paths = ["/agents", "/agents/bot", "/sessions", "/secrets", "/audit"];
    for p in paths {
        problem(
            gw.http.get(gw.url(p)).send().await.unwrap(),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
        problem(
            gw.http
                .get(gw.url(p))
                .bearer_auth("wrong")
                .send()
                .await
                .unwrap(),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
    }
    for (agent, token) in gw.all_agent_tokens() {
        for req in [
            gw.http.get(gw.url("/agents")).bearer_auth(&token),
            gw.http
                .post(gw.url("/agents/bot/token"))
                .bearer_auth(&token),
            gw.http
                .post(gw.url("/agents/bot/revoke"))
                .bearer_auth(&token),
            gw.http.get(gw.url("/secrets")).bearer_auth(&token),
            gw.http.get(gw.url("/audit")).bearer_auth(&token),
        ] {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "agent {agent}");
            problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
        }
    }
    // The agent token used above still works on MCP: nothing was revoked by the attempts.
    let bot = gw.all_agent_tokens().pop().unwrap().1;
    assert!(gw.mcp_works(&bot).await);

    // Unknown agents.
    for (method, p) in [
        ("GET", "/agents/nobody"),
        ("POST", "/agents/nobody/token"),
        ("POST", "/agents/nobody/rotate"),
        ("POST", "/agents/nobody/revoke"),
    ] {
        let req = match method {
            "GET" => gw.get(p),
            _ => gw.post(p),
        };
        problem(
            req.send().await.unwrap(),
            StatusCode::NOT_FOUND,
            "unknown_agent",
        )
        .await;
    }
    // A secret-file agent's token is its file.
    for p in [
        "/agents/claude/token",
        "/agents/claude/rotate",
        "/agents/claude/revoke",
    ] {
        let body = problem(
            gw.post(p).send().await.unwrap(),
            StatusCode::CONFLICT,
            "token_in_secret_file",
        )
        .await;
        assert!(body["detail"].as_str().unwrap().contains("claude-token"));
    }
    // Bodies: malformed, wrong types, unknown fields, not JSON, oversize.
    problem(
        gw.post("/agents/bot/rotate")
            .header("content-type", "application/json")
            .body("{\"grace_secs\": ")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    for bad in [
        json!({"grace_secs": "soon"}),
        json!({"grace": 1}),
        json!("soon"),
    ] {
        problem(
            gw.post("/agents/bot/rotate")
                .json(&bad)
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        )
        .await;
    }
    problem(
        gw.post("/agents/bot/rotate")
            .header("content-type", "text/plain")
            .body("grace")
            .send()
            .await
            .unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    let huge = format!(
        "{{\"grace_secs\": 1, \"pad\": \"{}\"}}",
        "x".repeat(2 << 20)
    );
    problem(
        gw.post("/agents/bot/rotate")
            .header("content-type", "application/json")
            .body(huge)
            .send()
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    problem(
        gw.get("/agents?limit=0").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    problem(
        gw.get("/agents?cursor=%21%21").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    // A bad surface header.
    problem(
        gw.get("/agents")
            .header("bridle-surface", "telepathy")
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_surface",
    )
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issued_token_prints_redacted() {
    let gw = Gw::start().await;
    let issued: bridle_gateway::admin::agents::IssuedTokenView = serde_json::from_value(
        json_ok(
            gw.post("/agents/bot/token").send().await.unwrap(),
            StatusCode::CREATED,
        )
        .await,
    )
    .unwrap();
    assert!(issued.token.starts_with("bdl_"));
    // A client that logs what it got (`{:?}`) shows no token, as the vault's own types do.
    let printed = format!("{issued:?}");
    assert!(!printed.contains(&issued.token), "{printed}");
    assert!(
        printed.contains("bot") && printed.contains("[redacted]"),
        "{printed}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_breaks_off_is_malformed_not_too_large() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = Gw::start().await;
    let addr = gw
        .base
        .strip_prefix("http://")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    // A chunked body whose second chunk size is not a number: the body cannot be read, whatever
    // its size. Optional bodies (a rotation's grace period) and required ones answer alike.
    for path in ["/admin/api/v1/agents/bot/rotate", "/admin/api/v1/agents"] {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n2\r\n{{}}\r\nzz\r\n",
            admin_support::ALICE
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        let status = answer.split(' ').nth(1).unwrap_or_default();
        assert_eq!(status, "400", "{path}: {answer}");
        assert!(answer.contains("malformed_json"), "{path}: {answer}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_and_required_bodies_take_the_same_json_media_types() {
    let gw = Gw::start().await;
    for (content_type, json) in [
        ("application/json", true),
        ("Application/JSON", true),
        ("application/json; charset=utf-8", true),
        ("application/vnd.bridle+json", true),
        ("application/jsonl", false),
        ("application/json-seq", false),
        ("text/plain", false),
    ] {
        // A required body (an agent's change) and an optional one (a rotation's grace period).
        let required = gw
            .patch("/agents/bot")
            .header("content-type", content_type)
            .body(r#"{"projects": ["demo"]}"#)
            .send()
            .await
            .unwrap()
            .status();
        let optional = gw
            .post("/agents/bot/rotate")
            .header("content-type", content_type)
            .body(r#"{"grace_secs": 5}"#)
            .send()
            .await
            .unwrap()
            .status();
        let want = if json {
            StatusCode::OK
        } else {
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        };
        assert_eq!((required, optional), (want, want), "{content_type}");
    }
    gw.stop().await;
}
