//! Each configurable limit, over real HTTP: concurrent sessions, in all and per principal (503
//! on `initialize`), concurrent listen streams (503 on GET SSE and on `subscriptions/listen`),
//! idle session expiry (404 afterwards), and concurrent calls per principal (`too_many_calls`
//! result). The body size limit is covered in `http_bad_input.rs`.

mod common;

use std::time::Duration;

use common::*;
use kberg_server::Limits;
use serde_json::json;

async fn delete(c: &Raw, sid: &str) -> u16 {
    read(
        c.http
            .delete(&c.url)
            .header(
                "authorization",
                format!("Bearer {}", c.token.as_deref().unwrap_or("")),
            )
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", PROTO_OLD)
            .send()
            .await
            .expect("DELETE"),
    )
    .await
    .status
}

#[tokio::test]
async fn concurrent_sessions_are_limited() {
    // One principal may take the whole (small) pool here.
    let s = start_with(
        Limits::default()
            .max_sessions(2)
            .max_sessions_per_principal(2),
    )
    .await;
    let c = Raw::new(&s.url, Some(READER));
    let a = c.initialize().await;
    let _b = c.initialize().await;
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTO_OLD, "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
            None,
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text);
    // Stateless requests need no session and are not limited by it.
    let r = c
        .stateless(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "s"}}),
        )
        .await;
    assert_eq!(r.reply(1)["result"]["content"][0]["text"], "s");
    assert_eq!(
        delete(&c, &a).await,
        200,
        "a successful DELETE answers 200 OK"
    );
    let again = c.initialize().await;
    let r = c.call_old(&again, 2, "echo", json!({"text": "ok"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "ok");
}

/// An `initialize` of a new session by `c`'s principal, as it is answered.
async fn try_initialize(c: &Raw) -> Resp {
    c.post(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTO_OLD, "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        None,
    )
    .await
}

#[tokio::test]
async fn one_principal_cannot_take_every_session() {
    // The default share: a quarter of the pool.
    let s = start_with(Limits::default().max_sessions(8)).await;
    let a = Raw::new(&s.url, Some(READER));
    let b = Raw::new(&s.url, Some(WRITER));
    let mut mine = Vec::new();
    for _ in 0..2 {
        mine.push(a.initialize().await);
    }
    let r = try_initialize(&a).await;
    assert_eq!(r.status, 503, "{}", r.text);
    let body: serde_json::Value = serde_json::from_str(&r.text).expect("a JSON body");
    assert_eq!(
        body["error"], "too_many_sessions_for_principal",
        "{}",
        r.text
    );
    assert!(
        body["message"].as_str().is_some_and(|m| m.ends_with('.')),
        "{}",
        r.text
    );
    // Another principal still gets sessions, and A's sessions still serve.
    let theirs = b.initialize().await;
    let r = b.call_old(&theirs, 1, "echo", json!({"text": "b"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "b");
    let r = a.call_old(&mine[0], 2, "echo", json!({"text": "a"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "a");
    // Once A ends one of its sessions, A may open one again (and only one).
    assert_eq!(delete(&a, &mine[0]).await, 200);
    let again = a.initialize().await;
    let r = a
        .call_old(&again, 3, "echo", json!({"text": "again"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "again");
    let r = try_initialize(&a).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(
        r.text.contains("too_many_sessions_for_principal"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn the_per_principal_share_is_configurable_and_at_least_one() {
    let s = start_with(
        Limits::default()
            .max_sessions(8)
            .max_sessions_per_principal(1),
    )
    .await;
    let a = Raw::new(&s.url, Some(READER));
    let _only = a.initialize().await;
    let r = try_initialize(&a).await;
    assert!(
        r.text.contains("too_many_sessions_for_principal"),
        "{}",
        r.text
    );
    // A pool of fewer than four still gives each principal one session.
    assert_eq!(
        Limits::default().max_sessions(3).sessions_per_principal(),
        1
    );
    assert_eq!(Limits::default().sessions_per_principal(), 64);
    let (app, _probe) = app();
    let err = kberg_server::router(
        app,
        &kberg_server::HttpConfig::default()
            .limits(Limits::default().max_sessions_per_principal(0)),
    )
    .expect_err("a share of no session");
    assert_eq!(err.code(), "invalid_config");
}

#[tokio::test]
async fn listen_streams_are_limited() {
    let s = start_with(Limits::default().max_listen_streams(1)).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let first = c.open_get(&sid).await;
    assert_eq!(first.status().as_u16(), 200);
    let other = c.initialize().await;
    let second = c.open_get(&other).await;
    assert_eq!(second.status().as_u16(), 503);
    let r = c
        .stateless(
            1,
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text);
    // A session header (any value: rmcp serves a 2026-07-28 request statelessly) does not
    // take a listen stream past the limit, with or without the `Mcp-Method` header.
    let listen = json!({
        "jsonrpc": "2.0", "id": 2, "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": true},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    })
    .to_string();
    for sid in [other.as_str(), "not-a-session"] {
        for with_method in [true, false] {
            let mut headers = vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-session-id", sid),
            ];
            if with_method {
                headers.push(("mcp-method", "subscriptions/listen"));
            }
            // A stream let through would never end: the deadline turns that into a failure.
            let r =
                tokio::time::timeout(kberg_testkit::WAIT, c.post_with(listen.clone(), &headers))
                    .await
                    .expect("a listen stream was opened past the limit");
            assert_eq!(r.status, 503, "{sid} {with_method}: {}", r.text);
        }
    }
    // Closing the first stream frees its slot (the server notices the disconnect).
    drop(first);
    let _reopened = kberg_testkit::eventually_async_ok("the slot to be returned", || async {
        let r = c.open_get(&other).await;
        match r.status().as_u16() {
            200 => Ok(r),
            status => Err(status),
        }
    })
    .await;
}

/// An idle timeout too long for the clock to add (`Duration::MAX`, "never") keeps sessions as
/// `None` does: each session added it to the time of its last activity unchecked, and its
/// transport panicked, so no request of any session was answered.
#[tokio::test]
async fn an_idle_timeout_too_long_for_the_clock_never_expires() {
    let s = start_with(Limits::default().session_idle_timeout(Some(Duration::MAX))).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let r = tokio::time::timeout(
        kberg_testkit::WAIT,
        c.call_old(&sid, 2, "echo", json!({"text": "still here"})),
    )
    .await
    .expect("the call was answered");
    assert_eq!(r["result"]["content"][0]["text"], "still here");
}

/// An `initialize` alone, answered 200: the new session's id. Only one request, so nothing
/// of the session's own making can reach it after a short idle timeout has ended it (the
/// session's idle clock starts with this answer).
async fn initialize_only(c: &Raw) -> String {
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": PROTO_OLD,
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"}
            }}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "initialize: {}", r.text);
    r.header("mcp-session-id").expect("session id header")
}

#[tokio::test]
async fn idle_sessions_expire() {
    // One session at most: the expired session must also give its slot back. The test's own
    // requests never come in a row on a session (a loaded machine can leave more than the
    // 100 ms between two of them, and the session would rightly be gone before the second).
    let s = start_with(
        Limits::default()
            .max_sessions(1)
            .session_idle_timeout(Some(Duration::from_millis(100))),
    )
    .await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = initialize_only(&c).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    // Each check is activity that restarts the idle clock, so checks are spaced well beyond
    // the idle timeout; the first that finds the session gone ends the loop.
    let mut expired = false;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        if c.post(list.clone(), Some(&sid)).await.status == 404 {
            expired = true;
            break;
        }
    }
    assert!(expired, "the idle session never expired");
    // The slot is free again: a new session is opened (past the limit it is refused, 503).
    let new = initialize_only(&c).await;
    assert_ne!(new, sid);
}

#[tokio::test]
async fn concurrent_calls_per_principal_are_limited_and_cancellation_reaches_the_tool() {
    let s = start_with(Limits::default().max_calls_per_principal(1)).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let bg = c.clone();
    let bg_sid = sid.clone();
    let slow = tokio::spawn(async move {
        bg.post(
            json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "slow", "arguments": {}}}),
            Some(&bg_sid),
        )
        .await
    });
    s.probe
        .started
        .lock()
        .await
        .recv()
        .await
        .expect("slow tool started");

    // The same id again while the first is in flight: refused on its own stream, without
    // taking over the first request's (which still ends by its cancellation below).
    let dup = tokio::time::timeout(
        kberg_testkit::WAIT,
        c.post(
            json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"text": "dup"}}}),
            Some(&sid),
        ),
    )
    .await
    .expect("the duplicate was answered");
    let answer = dup.reply(50);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");

    let r = c
        .call_old(&sid, 51, "echo", json!({"text": "second"}))
        .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["structuredContent"]["code"], "too_many_calls");
    assert_eq!(r["result"]["structuredContent"]["retryable"], true);

    // Another principal is not affected.
    let w = Raw::new(&s.url, Some(WRITER));
    let wsid = w.initialize().await;
    let r = w
        .call_old(&wsid, 52, "echo", json!({"text": "other"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "other");

    // The client cancels the slow call; the tool sees its token fire.
    let n = c
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": 50, "reason": "test"}}),
            Some(&sid),
        )
        .await;
    assert_eq!(n.status, 202, "{}", n.text);
    s.probe
        .cancelled
        .lock()
        .await
        .recv()
        .await
        .expect("the tool observed the cancellation");
    // No result is sent for a cancelled request.
    let resp = slow.await.expect("background call");
    assert!(
        resp.messages().iter().all(|m| m["id"] != json!(50)),
        "a cancelled request got a response: {}",
        resp.text
    );
    // The slot is free again.
    kberg_testkit::eventually_async_ok("the call slot to be returned", || async {
        let r = c.call_old(&sid, 53, "echo", json!({"text": "free"})).await;
        if r["result"]["content"][0]["text"] == "free" {
            Ok(())
        } else {
            Err(r)
        }
    })
    .await;
}

#[tokio::test]
async fn sessions_resumed_from_the_store_count_against_the_session_limit() {
    let store: std::sync::Arc<dyn kberg_server::SessionStore> =
        std::sync::Arc::new(SharedStore::default());
    let config = |max: usize| {
        kberg_testkit::serve::loopback()
            .auth(auth())
            .limits(Limits::default().max_sessions(max))
            .session_store(std::sync::Arc::clone(&store))
    };
    let a = start_config(config(1)).await;
    let b = start_config(config(8)).await;
    let on_a = Raw::new(&a.url, Some(READER));
    let on_b = Raw::new(&b.url, Some(READER));
    // A session started on B, and A's one session slot taken.
    let from_b = on_b.initialize().await;
    let own = on_a.initialize().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    // Naming B's session on A would open a second session there: refused like an initialize.
    let r = on_a.post(list.clone(), Some(&from_b)).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.text.contains("too_many_sessions"), "{}", r.text);
    // Once A's own session ends, B's resumes on A.
    assert_eq!(delete(&on_a, &own).await, 200);
    let r = on_a.post(list, Some(&from_b)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.reply(1)["result"]["tools"].is_array(), "{}", r.text);
}

/// A principal's share of the sessions holds for the sessions it resumes from the store too:
/// otherwise it would start its sessions on other instances, each within its share there, and
/// gather them on one, taking every session there as the share is meant to prevent.
#[tokio::test]
async fn sessions_resumed_from_the_store_count_against_the_principals_share() {
    let store: std::sync::Arc<dyn kberg_server::SessionStore> =
        std::sync::Arc::new(SharedStore::default());
    let config = |share: usize| {
        kberg_testkit::serve::loopback()
            .auth(auth())
            .limits(
                Limits::default()
                    .max_sessions(8)
                    .max_sessions_per_principal(share),
            )
            .session_store(std::sync::Arc::clone(&store))
    };
    let a = start_config(config(1)).await;
    let b = start_config(config(8)).await;
    let on_a = Raw::new(&a.url, Some(READER));
    let on_b = Raw::new(&b.url, Some(READER));
    let from_b = on_b.initialize().await;
    let own = on_a.initialize().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    // The reader holds its one session on A: resuming another there is refused.
    let r = on_a.post(list.clone(), Some(&from_b)).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(
        r.text.contains("too_many_sessions_for_principal"),
        "{}",
        r.text
    );
    // Another principal is not held back by the reader's share.
    let writer_a = Raw::new(&a.url, Some(WRITER));
    writer_a.initialize().await;
    // Once the reader's session on A ends, B's resumes there.
    assert_eq!(delete(&on_a, &own).await, 200);
    let r = on_a.post(list, Some(&from_b)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.reply(1)["result"]["tools"].is_array(), "{}", r.text);
}

/// With one principal only (the default `OpenAccess`, or bearer tokens that all name one
/// principal) an unset share is the whole limit: a share keeps principals from starving one
/// another, and there is no other one to keep room for.
#[tokio::test]
async fn one_principal_alone_may_take_the_whole_limit() {
    let limits = Limits::default().max_sessions(4).max_listen_streams(2);
    let single = kberg_server::BearerTokens::new()
        .with_token("t1", kberg_core::Principal::new("app"))
        .with_token("t2", kberg_core::Principal::new("app"));
    for (what, config, token) in [
        (
            "open access",
            kberg_testkit::serve::loopback().limits(limits.clone()),
            None,
        ),
        (
            "one principal's tokens",
            kberg_testkit::serve::loopback()
                .auth(single)
                .limits(limits.clone()),
            Some("t2"),
        ),
    ] {
        let s = start_config(config).await;
        let c = Raw::new(&s.url, token);
        let mut sids = Vec::new();
        for _ in 0..4 {
            sids.push(c.initialize().await);
        }
        // The fifth is over the whole limit, not over a share of it.
        let r = try_initialize(&c).await;
        assert_eq!(r.status, 503, "{what}: {}", r.text);
        let body: serde_json::Value = serde_json::from_str(&r.text).expect("a JSON body");
        assert_eq!(body["error"], "too_many_sessions", "{what}: {}", r.text);
        let first = c.open_get(&sids[0]).await;
        assert_eq!(first.status().as_u16(), 200, "{what}");
        let second = c.open_get(&sids[1]).await;
        assert_eq!(second.status().as_u16(), 200, "{what}");
        let third = c.open_get(&sids[2]).await;
        assert_eq!(third.status().as_u16(), 503, "{what}");
        let text = third.text().await.unwrap_or_default();
        assert!(text.contains("\"too_many_streams\""), "{what}: {text}");
    }
}
