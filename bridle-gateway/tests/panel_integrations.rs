//! The integrations page turning an upstream off and on (HTML level, `oneshot`): a real
//! upstream MCP server on 127.0.0.1 behind the gateway; the panel's form posts go through the
//! admin API's enable and disable, and the page's state and tool count follow (connected with
//! its one tool, disabled with none, connected again). A watcher sees no switch and its post is
//! refused; an unknown namespace is the panel's 404; a cross-site post is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;
#[path = "common/whoami_upstream.rs"]
mod whoami_upstream;

use axum::http::StatusCode;
use kberg_testkit::eventually_async_ok;
use panel_support::{Caller, Client, Fixture, WATCHER, panel_config, signed_in};

/// The text of the element with `id` on the page (the first one; its inner HTML).
fn element(body: &str, id: &str) -> String {
    let start = body
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in\n{body}"));
    let open = start + body[start..].find('>').unwrap() + 1;
    let close = open + body[open..].find("</").unwrap();
    body[open..close].trim().to_string()
}

/// Polls the list page until `want` holds for tickets' state and tool count, within a deadline.
async fn until_listed(c: &Client, want: impl Fn(&str, &str) -> bool) -> (String, String) {
    eventually_async_ok("the integration as expected", || async {
        let page = c.get("/panel/integrations").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let state = element(&page.body, "state-tickets");
        let tools = element(&page.body, "tools-tickets");
        if want(&state, &tools) {
            Ok((state, tools))
        } else {
            Err(format!("{state} / {tools}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_is_disabled_and_enabled_from_its_page() {
    let (url, upstream) = whoami_upstream::start().await;
    let fixture = Fixture::build_with_yaml(
        &format!("upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n"),
        |b| b,
    )
    .await;
    let c = signed_in(&fixture).await;
    until_listed(&c, |s, t| s.contains("connected") && t == "1").await;

    let page = c.get("/panel/integrations/tickets").await;
    assert_eq!(element(&page.body, "integration-enabled"), "yes");
    assert_eq!(element(&page.body, "integration-tool-count"), "1");
    assert!(
        page.body
            .contains("action=\"/panel/integrations/tickets/disable\"")
    );

    // Refused: a cross-site post, a watcher (who sees no switch), an unknown namespace.
    let r = c
        .post_as(
            "/panel/integrations/tickets/disable",
            &[],
            Caller::CrossSite,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let mut watcher = Client::new(fixture.router(panel_config()));
    watcher.login(WATCHER).await;
    let seen = watcher.get("/panel/integrations/tickets").await;
    assert!(!seen.body.contains("integration-switch"));
    let r = watcher
        .post("/panel/integrations/tickets/disable", &[])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.body.contains("read_only"));
    let r = c.post("/panel/integrations/nope/disable", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    until_listed(&c, |s, t| s.contains("connected") && t == "1").await;

    // Disabled: the page says so, its tools are gone, bridle.yaml has it.
    let r = c.post("/panel/integrations/tickets/disable", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/integrations/tickets?notice=integration_disabled"
    );
    let page = c.get(r.location()).await;
    assert!(page.body.contains("Disabled: its tools have left"));
    assert_eq!(element(&page.body, "integration-enabled"), "no");
    assert_eq!(element(&page.body, "integration-tool-count"), "0");
    assert!(
        page.body
            .contains("action=\"/panel/integrations/tickets/enable\"")
    );
    let (state, _) = until_listed(&c, |s, t| s.contains("disabled") && t == "0").await;
    assert!(state.contains("disabled"));
    let yaml = std::fs::read_to_string(fixture.tmp.path().join("bridle.yaml")).unwrap();
    assert!(yaml.contains("enabled: false"), "{yaml}");

    // Enabled again: it reconnects and its tool returns.
    let r = c.post("/panel/integrations/tickets/enable", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/integrations/tickets?notice=integration_enabled"
    );
    let page = c.get(r.location()).await;
    assert!(page.body.contains("Enabled: it connects again"));
    assert_eq!(element(&page.body, "integration-enabled"), "yes");
    until_listed(&c, |s, t| s.contains("connected") && t == "1").await;
    upstream.cancel();
}
