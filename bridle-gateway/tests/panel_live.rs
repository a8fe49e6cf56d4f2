//! The panel's live streams at the HTTP level: the sessions stream (a `changed` event per
//! session event of the admin API's stream, on which the sessions and agents lists fetch their
//! rows partial), the audit tail (new entries matching the filters as table rows, the newest id
//! as the event id, resumed by `Last-Event-ID` without repeating a row); both end with the
//! panel session. The rows a live list fetches again on its own do not count as use, so an
//! unattended page does not keep an idle session open. The pages carry the SSE extension's
//! attributes, and the extension is served compiled in.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use panel_support::{ALICE, Client, Fixture, panel_config, signed_in};
use tower::ServiceExt;

/// A Server-Sent Events body, read event by event.
struct Events {
    body: axum::body::BodyDataStream,
    buffer: String,
}

/// One event: its name, id and data.
#[derive(Debug, Default)]
struct Frame {
    event: String,
    id: Option<String>,
    data: String,
}

impl Events {
    async fn open(c: &Client, path: &str, last_event_id: Option<&str>) -> Self {
        let mut b = Request::builder()
            .uri(path)
            .header(header::HOST, &c.host)
            .header(header::COOKIE, c.cookie.as_deref().unwrap());
        if let Some(id) = last_event_id {
            b = b.header("last-event-id", id);
        }
        let response = c
            .router
            .clone()
            .oneshot(b.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Self {
            body: response.into_body().into_data_stream(),
            buffer: String::new(),
        }
    }

    /// The next event (comments skipped), or `None` when the stream ended; within a deadline.
    async fn next(&mut self) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + kberg_testkit::WAIT;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut frame = Frame::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        frame.event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        frame.id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if !frame.event.is_empty() || !data.is_empty() {
                    frame.data = data.join("\n");
                    return Some(frame);
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .expect("an event within the deadline");
            match chunk {
                None => return None,
                Some(bytes) => self
                    .buffer
                    .push_str(std::str::from_utf8(&bytes.unwrap()).unwrap()),
            }
        }
    }

    /// The next event named `name`, skipping others.
    async fn next_named(&mut self, name: &str) -> Frame {
        loop {
            let frame = self.next().await.expect("the stream is open");
            if frame.event == name {
                return frame;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_stream_announces_changes_and_ends_with_the_panel_session() {
    let fixture = Fixture::new().await;
    let mut c = signed_in(&fixture).await;

    let page = c.get("/panel/sessions").await;
    assert!(page.body.contains(r#"hx-ext="sse""#));
    assert!(page.body.contains("sse-connect="));
    assert!(page.body.contains(r#"hx-trigger="sse:changed""#));
    assert!(!page.body.contains("every 5s"), "no polling any more");
    let agents = c.get("/panel/agents").await;
    assert!(agents.body.contains(r#"hx-trigger="sse:changed""#));

    let mut events = Events::open(&c, "/panel/sessions/live", None).await;
    events.next_named("ready").await;
    fixture.ctx.sessions.touch(
        "claude",
        Some("claude"),
        Some("live-sess-1"),
        Some("2025-11-25"),
    );
    let changed = events.next_named("changed").await;
    assert_eq!(changed.data, "connect");

    // What the lists then fetch: their rows alone, with the new session.
    let rows = c.get_htmx("/panel/sessions").await;
    assert_eq!(rows.status, StatusCode::OK);
    assert!(!rows.body.contains("<html"), "a partial");
    assert!(rows.body.contains("live-sess-1"));
    let agent_rows = c.get_htmx("/panel/agents").await;
    assert!(!agent_rows.body.contains("<html"));
    assert!(agent_rows.body.contains(r#"id="agent-claude""#));

    // Ending the session through the panel is itself an event.
    let r = c.post("/panel/sessions/live-sess-1/end", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(events.next_named("changed").await.data, "disconnect");

    // Log out: the stream ends (checked within its session-check interval).
    let r = c.post("/panel/logout", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    loop {
        match events.next().await {
            None => break,
            Some(f) => assert_ne!(f.event, "entries", "{f:?}"),
        }
    }
    // Without a session there is no stream, only the way to the log-in page.
    let r = c.get("/panel/sessions/live").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.location().starts_with("/panel/login"));
    c.cookie = None;
}

/// The `after=` the audit page's live tail starts from.
fn tail_start(body: &str) -> u64 {
    let body = body.replace("&amp;", "&");
    let at = body.find("after=").expect("a live tail");
    body[at + 6..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_tail_sends_new_matching_entries_once() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let a = fixture.propose_guardrail("tail-a");
    let b = fixture.propose_guardrail("tail-b");
    // Something in the log before the page is drawn.
    let r = c.post(&format!("/panel/queue/{a}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);

    let page = c.get("/panel/audit?source=user").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(r#"sse-swap="entries""#));
    assert!(page.body.contains(r#"hx-swap="afterbegin""#));
    assert!(page.body.contains(r#"id="live-tail""#));
    let start = tail_start(&page.body);
    assert!(start > 0, "the approval is in the log");
    // Not on later pages or oldest first.
    let asc = c.get("/panel/audit?order=asc").await;
    assert!(!asc.body.contains("sse-connect"));

    let mut tail = Events::open(
        &c,
        &format!("/panel/audit/tail?source=user&after={start}"),
        None,
    )
    .await;
    let r = c
        .post(
            &format!("/panel/queue/{b}/reject"),
            &[("reason", "tail test")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let entries = tail.next_named("entries").await;
    let newest: u64 = entries.id.as_deref().unwrap().parse().unwrap();
    assert!(newest > start);
    assert!(
        entries
            .data
            .contains(&format!(r#"<tr id="entry-{newest}""#)),
        "{}",
        entries.data
    );
    assert!(entries.data.contains("alice"), "{}", entries.data);
    assert!(
        !entries.data.contains(&format!(r#"id="entry-{start}""#)),
        "nothing from before the page"
    );
    assert!(!entries.data.contains("<html"), "rows only");

    // A browser that reconnects says where it was; nothing comes twice.
    drop(tail);
    let mut resumed = Events::open(
        &c,
        &format!("/panel/audit/tail?source=user&after={start}"),
        Some(&newest.to_string()),
    )
    .await;
    let d = fixture.propose_guardrail("tail-d");
    let r = c.post(&format!("/panel/queue/{d}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let next = resumed.next_named("entries").await;
    assert!(
        !next.data.contains(&format!(r#"id="entry-{newest}""#)),
        "{}",
        next.data
    );
    let later: u64 = next.id.as_deref().unwrap().parse().unwrap();
    assert!(later > newest);
}

#[tokio::test]
async fn a_bad_tail_filter_is_a_clear_error_not_a_silent_stream() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let r = c.get("/panel/audit/tail?from=yesterday").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("invalid_query"));
    let r = c.get("/panel/audit/tail?after=minus-one").await;
    assert!(r.status.is_client_error());
}

#[tokio::test]
async fn the_sse_extension_is_served_compiled_in_and_linked_by_every_page() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let ext = c.get("/panel/assets/htmx-ext-sse-2.2.4.min.js").await;
    assert_eq!(ext.status, StatusCode::OK);
    assert_eq!(
        ext.body,
        include_str!("../panel-assets/vendor/htmx-ext-sse-2.2.4.min.js")
    );
    assert!(ext.header("cache-control").unwrap().contains("immutable"));
    assert_eq!(bridle_gateway::panel::HTMX_SSE_VERSION, "2.2.4");
    let page = c.get("/panel").await;
    assert!(
        page.body
            .contains(r#"<script src="/panel/assets/htmx-ext-sse-2.2.4.min.js" defer>"#)
    );
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("connect-src 'self'"), "{csp}");
}

/// The sessions and agents lists fetch their rows again on each change the sessions stream
/// announces, with agents at work many times a minute; those fetches are the page's, not the
/// admin's, so the session still ends once the admin has been idle for the idle timeout.
#[tokio::test]
async fn a_live_lists_own_refreshes_do_not_keep_an_idle_session_open() {
    let fixture = Fixture::new().await;
    let idle = std::time::Duration::from_secs(2);
    let mut c = Client::new(
        fixture
            .router(panel_config().session_lifetimes(std::time::Duration::from_secs(3600), idle)),
    );
    c.login(ALICE).await;
    let refresh = |path: &'static str| {
        let c = &c;
        async move {
            c.send(
                Request::builder()
                    .uri(path)
                    .header(header::HOST, &c.host)
                    .header(header::COOKIE, c.cookie.as_deref().unwrap())
                    .header("hx-request", "true")
                    .header("bridle-live-refresh", "1")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
        }
    };
    for (page, rows) in [
        ("/panel/sessions", "/panel/sessions"),
        ("/panel/agents", "/panel/agents"),
    ] {
        // The list marks its own fetches, and they answer the rows while the session lives.
        let body = c.get(page).await.body;
        assert!(
            body.contains(r#"hx-headers='{"bridle-live-refresh": "1"}'"#),
            "{page}: {body}"
        );
        let r = refresh(rows).await;
        assert_eq!(r.status, StatusCode::OK, "{rows}: {}", r.body);
        assert!(!r.body.contains("<html"), "{rows}: the rows alone");
    }
    // Refreshes keep coming, as on an unattended page; the session ends all the same.
    kberg_testkit::eventually_async("the idle session to end despite the refreshes", || async {
        let r = refresh("/panel/sessions").await;
        (r.status == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    let r = c.get("/panel").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.location().starts_with("/panel/login"), "{}", r.location());
}
