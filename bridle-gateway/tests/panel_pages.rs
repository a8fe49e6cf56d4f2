//! The web panel at the HTML level: every page and partial through the in-process router
//! (`tower::ServiceExt::oneshot`), the security headers and cookie, log-in and log-out,
//! the cross-site check, read-only mode, and each page's error states, bad input in a path or a
//! query string included (always the panel's page with a stable code, never axum's plain-text
//! 400).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use std::time::Duration;

use axum::http::StatusCode;
use bridle_gateway::panel::PanelConfig;
use panel_support::{ALICE, BOB, Caller, Client, Fixture, Reply, WATCHER, panel_config, signed_in};

/// No inline script or style anywhere in a page: the CSP would block it.
fn assert_no_inline(body: &str) {
    assert!(!body.contains("<style"), "an inline <style>");
    assert!(!body.contains(" style="), "an inline style attribute");
    assert!(
        !body.contains(" on") || !body.contains(" onclick="),
        "an inline handler"
    );
    for chunk in body.split("<script").skip(1) {
        let tag = chunk.split('>').next().unwrap_or_default();
        assert!(tag.contains(" src="), "an inline <script>: {tag}");
    }
}

#[tokio::test]
async fn the_login_page_is_served_with_a_strict_policy() {
    let fixture = Fixture::new().await;
    let c = Client::new(fixture.router(panel_config()));
    let r = c.get("/panel/login").await;
    assert_eq!(r.status, StatusCode::OK);
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(r.body.contains(r#"<label for="token">"#));
    assert!(r.body.contains("/panel/assets/htmx-2.0.11.min.js"));
    assert!(r.body.contains(r#""allowEval":false"#));
    assert!(r.body.contains(r#""includeIndicatorStyles":false"#));
    assert_no_inline(&r.body);
    // The base path itself leads to the log-in page without a session.
    let r = c.get("/panel").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.location().starts_with("/panel"), "{}", r.location());
}

/// The path of the panel's own asset ending in `ext` that `html` links (`panel-<digest><ext>`).
fn asset_path(html: &str, ext: &str) -> String {
    html.split('"')
        .find(|part| part.contains("/assets/panel-") && part.ends_with(ext))
        .unwrap_or_else(|| panic!("no panel{ext} linked in {html}"))
        .to_string()
}

#[tokio::test]
async fn assets_are_compiled_in_with_their_types() {
    let fixture = Fixture::new().await;
    let c = Client::new(fixture.router(panel_config()));
    let htmx = c.get("/panel/assets/htmx-2.0.11.min.js").await;
    assert_eq!(htmx.status, StatusCode::OK);
    assert!(
        htmx.header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    assert_eq!(
        htmx.body,
        include_str!("../panel-assets/vendor/htmx-2.0.11.min.js")
    );
    assert!(htmx.header("cache-control").unwrap().contains("immutable"));
    // The panel's own files are named by a digest of their content: the page says which.
    let login = c.get("/panel/login").await;
    let css_path = asset_path(&login.body, ".css");
    let js_path = asset_path(&login.body, ".js");
    assert!(css_path.starts_with("/panel/assets/panel-"), "{css_path}");
    assert_ne!(
        c.get("/panel/assets/panel-1.css").await.status,
        StatusCode::OK
    );
    let css = c.get(&css_path).await;
    assert!(css.header("content-type").unwrap().starts_with("text/css"));
    assert!(css.body.contains("prefers-color-scheme: dark"));
    assert!(css.body.contains(":focus-visible"));
    let js = c.get(&js_path).await;
    assert!(
        js.header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    assert_eq!(bridle_gateway::panel::HTMX_VERSION, "2.0.11");
}

#[tokio::test]
async fn log_in_sets_a_server_side_session_cookie_and_refuses_other_tokens() {
    let fixture = Fixture::new().await;
    let c = Client::new(fixture.router(panel_config()));

    for bad in ["", "nope", "alice", &format!("{ALICE}x")] {
        let r = c.post("/panel/login", &[("token", bad)]).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad}");
        assert!(r.body.contains("That is not an admin credential."));
        assert!(r.set_cookies().is_empty());
        assert!(!bad.is_empty() && !r.body.contains(bad) || bad.is_empty());
    }
    // A form without the field is a form error, not a crash.
    let r = c.post("/panel/login", &[("nothing", "x")]).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.body.contains("invalid_form"));
    // A form over the body limit is 413 `body_too_large`, as the admin API answers such a body.
    let huge = "a".repeat(3 * 1024 * 1024);
    let r = c.post("/panel/login", &[("token", huge.as_str())]).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    assert!(
        r.body.contains("data-code=\"body_too_large\""),
        "{}",
        r.body
    );

    let r = c
        .post(
            "/panel/login",
            &[("token", ALICE), ("next", "/panel/queue")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/panel/queue");
    let cookie = r.set_cookies().pop().unwrap();
    assert!(cookie.starts_with("bridle-panel="), "{cookie}");
    for attr in ["Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=28800"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(
        !cookie.contains(ALICE),
        "the credential never goes to the browser"
    );

    // `next` never leads off the panel.
    for next in [
        "https://evil.example/",
        "//evil.example/",
        "/elsewhere",
        "/panel/login",
    ] {
        let r = c
            .post("/panel/login", &[("token", ALICE), ("next", next)])
            .await;
        assert_eq!(r.location(), "/panel", "{next}");
    }
    // A `next` beyond ASCII (a search for a word with an accent) still leads there: the address
    // is percent-encoded rather than failing as a `Location` header.
    let r = c
        .post(
            "/panel/login",
            &[("token", ALICE), ("next", "/panel/memory?q=café")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location(), "/panel/memory?q=caf%C3%A9");

    // Behind TLS: the __Host- prefix and Secure.
    let c = Client::new(fixture.router(panel_config().behind_tls(true)));
    let r = c.post("/panel/login", &[("token", ALICE)]).await;
    let cookie = r.set_cookies().pop().unwrap();
    assert!(cookie.starts_with("__Host-bridle-panel="), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(
        cookie.contains("Path=/") && !cookie.contains("Domain"),
        "{cookie}"
    );
}

#[tokio::test]
async fn pages_need_a_session() {
    let fixture = Fixture::new().await;
    let mut c = Client::new(fixture.router(panel_config()));
    let r = c.get("/panel/queue?status=all").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(
        r.location(),
        "/panel/login?next=%2Fpanel%2Fqueue%3Fstatus%3Dall"
    );
    let r = c.get_htmx("/panel/queue").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.header("hx-redirect"), Some("/panel/login"));
    let id = fixture.propose_guardrail("no-session");
    let r = c.post(&format!("/panel/queue/{id}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/panel/login");
    assert_eq!(fixture.proposal_status(id), "pending");
    // A made-up cookie is no session.
    c.cookie = Some("bridle-panel=made-up".into());
    assert_eq!(c.get("/panel").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn every_page_renders_for_a_signed_in_admin() {
    let fixture = Fixture::new().await;
    let proposal = fixture.propose_guardrail("every-page");
    fixture.request_scope("write to gitea");
    let c = signed_in(&fixture).await;
    let pages = [
        ("/panel", "Overview"),
        ("/panel/projects", "Projects"),
        ("/panel/projects/demo", "Canonical document (YAML)"),
        (
            "/panel/projects/demo/preview?agent_type=claude",
            "CLAUDE.md",
        ),
        ("/panel/queue", "Review queue"),
        (&format!("/panel/queue/{proposal}"), "Provenance"),
        (
            "/panel/queue?status=all&source=agent&project=demo",
            "every-page",
        ),
        ("/panel/scope", "write to gitea"),
        ("/panel/scope?status=all", "Scope tickets"),
        (
            "/panel/integrations",
            "No upstream MCP servers are configured.",
        ),
    ];
    for (path, text) in pages {
        let r = c.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(r.body.contains(text), "{path} lacks {text:?}: {}", r.body);
        assert!(r.body.contains("alice"), "{path} names the admin");
        assert!(r.body.contains(r#"action="/panel/logout""#), "{path}");
        assert!(r.header("content-security-policy").is_some(), "{path}");
        assert_no_inline(&r.body);
        // Every input, select and textarea has a label.
        for chunk in r.body.split("id=\"").skip(1) {
            let id = chunk.split('"').next().unwrap();
            let before = r.body.split(&format!("id=\"{id}\"")).next().unwrap();
            let tag_start = before.rfind('<').unwrap();
            let tag = &before[tag_start..];
            if ["<input", "<select", "<textarea"]
                .iter()
                .any(|t| tag.starts_with(t))
                && !tag.contains("type=\"hidden\"")
            {
                assert!(
                    r.body.contains(&format!("for=\"{id}\"")),
                    "{path}: #{id} has no label"
                );
            }
        }
    }
    // The base path with a slash leads to the overview too.
    let r = c.get("/panel/").await;
    assert!(
        r.status == StatusCode::OK && r.body.contains("Overview")
            || r.status == StatusCode::SEE_OTHER && r.location() == "/panel",
        "{} {}",
        r.status,
        r.location()
    );
    // The overview counts what waits.
    let r = c.get("/panel").await;
    assert!(r.body.contains("proposals waiting for a decision"));
    assert!(r.body.contains("every-page"));
    // The history names the proposal a change came from, with a link to it.
    fixture
        .ctx
        .store
        .approve(proposal, "admin:bob@api")
        .unwrap();
    let r = c.get("/panel/projects/demo").await;
    assert!(
        r.body.contains(&format!(
            "(<a href=\"/panel/queue/{proposal}\">proposal #{proposal}</a>)"
        )),
        "{}",
        r.body
    );
    // The preview as an htmx partial: no layout around it.
    let r = c
        .get_htmx("/panel/projects/demo/preview?agent_type=codex")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("AGENTS.md"), "{}", r.body);
    assert!(!r.body.contains("<html"));
}

/// Input that does not parse, in a path or a query string, gets the panel's page with a
/// stable code, never axum's plain-text 400: a path segment that does not parse names no page
/// (404 `not_found`), a filter query that does not parse is refused (422 `invalid_form`), and a
/// notice or log-in query that does not parse is ignored (the page, without the notice).
#[tokio::test]
async fn bad_input_in_a_path_or_a_query_gets_the_panels_page() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let assert_page = |what: &str, r: &Reply, status: StatusCode, code: &str| {
        assert_eq!(r.status, status, "{what}: {}", r.body);
        assert!(
            r.header("content-type")
                .unwrap_or_default()
                .starts_with("text/html"),
            "{what}: {:?}",
            r.header("content-type")
        );
        assert!(r.body.contains("<html"), "{what}: {}", r.body);
        assert!(
            r.body.contains(&format!("<code>{code}</code>")),
            "{what}: {}",
            r.body
        );
        assert!(
            !r.body.contains("Failed to deserialize"),
            "{what}: {}",
            r.body
        );
    };

    // Paths: a number that is not one, a segment that is not UTF-8.
    for path in [
        "/panel/queue/abc",
        "/panel/queue/-1",
        "/panel/queue/99999999999999999999999",
        "/panel/projects/%FF",
        "/panel/projects/%FF/preview",
        "/panel/agents/%FF",
        "/panel/secrets/%FF",
        "/panel/integrations/%FF",
        "/panel/patterns/%FF/x/chunks",
        "/panel/patterns/runs/%FF/events",
    ] {
        assert_page(path, &c.get(path).await, StatusCode::NOT_FOUND, "not_found");
    }
    for path in [
        "/panel/queue/abc/approve",
        "/panel/queue/abc/reject",
        "/panel/scope/abc/approve",
        "/panel/scope/abc/deny",
        "/panel/secrets/s/versions/abc/revoke",
        "/panel/agents/%FF/revoke",
        "/panel/sessions/%FF/end",
        "/panel/projects/%FF/save",
        "/panel/projects/%FF/repair",
        "/panel/projects/demo/guardrails/%FF/remove",
        "/panel/patterns/demo/%FF/remove",
        "/panel/memory/patterns/%FF/purge",
        "/panel/projects/%FF/edit",
        "/panel/projects/%FF/review",
        "/panel/projects/%FF/guardrails",
        "/panel/agents/%FF/change",
        "/panel/agents/%FF/token",
        "/panel/agents/%FF/rotate",
        "/panel/secrets/%FF/rotate",
        "/panel/secrets/%FF/versions/1/revoke",
        "/panel/patterns/%FF",
        "/panel/patterns/demo/%FF/change",
        "/panel/standard-patterns/%FF",
        "/panel/standard-patterns/demo/%FF/remove",
        "/panel/patterns/demo/%FF/examples",
        "/panel/patterns/demo/p/examples/%FF/remove",
        "/panel/patterns/demo/p/examples/%FF/index",
    ] {
        let r = c.post(path, &[("reason", "r"), ("confirm", "x")]).await;
        assert_page(path, &r, StatusCode::NOT_FOUND, "not_found");
    }
    // An address the panel has, asked with a method it does not answer there: a form's address
    // opened as a page (a token page's, opened again), a form sent to a page.
    for (method, path) in [
        ("GET", "/panel/agents/bot/token"),
        ("GET", "/panel/queue/bulk"),
        ("GET", "/panel/sessions/s-1/end"),
        ("POST", "/panel/queue"),
        ("POST", "/panel/audit"),
        ("POST", "/panel/"),
    ] {
        let r = if method == "GET" {
            c.get(path).await
        } else {
            c.post(path, &[]).await
        };
        assert_page(
            &format!("{method} {path}"),
            &r,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        );
    }
    // Nothing was decided.
    assert_eq!(
        fixture.proposal_status(fixture.propose_guardrail("kept")),
        "pending"
    );

    // Filters that do not parse (a field given twice, a cursor that is not a number).
    for path in [
        "/panel/queue?status=pending&status=approved",
        "/panel/scope?status=a&status=b",
        "/panel/audit?kind=a&kind=b",
        "/panel/audit/export?kind=a&kind=b",
        "/panel/audit/tail?after=x",
        "/panel/sessions?agent=a&agent=b",
        "/panel/projects?q=a&q=b",
        "/panel/projects/demo/preview?agent_type=a&agent_type=b",
        "/panel/memory?q=a&q=b",
        "/panel/patterns?run=a&run=b",
    ] {
        assert_page(
            path,
            &c.get(path).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_form",
        );
    }

    // A notice that does not parse is left out and the page is shown; the same notice that
    // parses is shown.
    for (page, good, bad, text) in [
        (
            "/panel/agents",
            "notice=agent_revoked&id=3",
            "notice=agent_revoked&id=x",
            "Every token of this agent is revoked",
        ),
        (
            "/panel/queue",
            "notice=rejected&id=7",
            "notice=rejected&id=x",
            "Proposal #7 rejected.",
        ),
        (
            "/panel/scope",
            "notice=ticket_denied&id=4",
            "notice=ticket_denied&id=-4",
            "Scope ticket #4 denied.",
        ),
        (
            "/panel/projects/demo",
            "notice=saved&revision=2",
            "notice=saved&revision=abc",
            "Saved (revision 2).",
        ),
        (
            "/panel/secrets",
            "notice=secret_created",
            "notice=secret_created&id=1&id=2",
            "Secret added.",
        ),
        (
            "/panel/memory",
            "notice=memories_purged&id=2",
            "notice=memories_purged&id=many",
            "memories removed.",
        ),
        (
            "/panel/sessions",
            "notice=session_ended",
            "notice=session_ended&revision=x",
            "Session ended.",
        ),
        (
            "/panel/patterns",
            "notice=pattern_added",
            "notice=pattern_added&id=x",
            "Pattern added.",
        ),
    ] {
        let shown = c.get(&format!("{page}?{good}")).await;
        let left_out = c.get(&format!("{page}?{bad}")).await;
        assert_eq!(
            shown.status,
            StatusCode::OK,
            "{page}?{good}: {}",
            shown.body
        );
        assert_eq!(
            left_out.status,
            StatusCode::OK,
            "{page}?{bad}: {}",
            left_out.body
        );
        assert!(shown.body.contains(text), "{page}?{good}: {}", shown.body);
        assert!(
            !left_out.body.contains(text),
            "{page}?{bad}: {}",
            left_out.body
        );
    }

    // The log-in page is the way in: it is always shown.
    let out = Client::new(fixture.router(panel_config()));
    for path in [
        "/panel/login?signed_out=300",
        "/panel/login?signed_out=yes",
        "/panel/login?signed_out=1&next=/panel/queue",
    ] {
        let r = out.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(r.body.contains("You are signed out."), "{path}: {}", r.body);
        assert!(r.body.contains(r#"<label for="token">"#), "{path}");
    }
    let r = out
        .get("/panel/login?next=/panel/queue&next=/panel/scope")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains(r#"<label for="token">"#));
}

/// An integration's page (its own fixture: an upstream nothing answers at, which still has a
/// page) leaves out a notice that does not parse, and answers a namespace that is not UTF-8
/// with the panel's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integrations_page_leaves_out_a_notice_that_does_not_parse() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let fixture = Fixture::build_with_yaml(
        &format!("upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n"),
        |b| b,
    )
    .await;
    let c = signed_in(&fixture).await;
    let text = "connects again";
    let shown = c
        .get("/panel/integrations/tickets?notice=integration_enabled")
        .await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert!(shown.body.contains(text), "{}", shown.body);
    let left_out = c
        .get("/panel/integrations/tickets?notice=integration_enabled&id=x")
        .await;
    assert_eq!(left_out.status, StatusCode::OK, "{}", left_out.body);
    assert!(!left_out.body.contains(text), "{}", left_out.body);
    for (path, post) in [
        ("/panel/integrations/%FF", false),
        ("/panel/integrations/%FF/enable", true),
        ("/panel/integrations/%FF/disable", true),
    ] {
        let r = if post {
            c.post(path, &[]).await
        } else {
            c.get(path).await
        };
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.body);
        assert!(
            r.body.contains("<code>not_found</code>"),
            "{path}: {}",
            r.body
        );
    }
}

#[tokio::test]
async fn error_states_are_pages_with_the_api_code() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let cases = [
        (
            "/panel/projects/nope",
            StatusCode::NOT_FOUND,
            "unknown_project",
        ),
        (
            "/panel/projects/demo/preview?agent_type=nope",
            StatusCode::NOT_FOUND,
            "unknown_agent_type",
        ),
        (
            "/panel/projects/demo/preview",
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_form",
        ),
        ("/panel/queue/999", StatusCode::NOT_FOUND, "not_found"),
        ("/panel/queue/abc", StatusCode::NOT_FOUND, "not_found"),
        (
            "/panel/queue?status=bogus",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        (
            "/panel/scope?status=bogus",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        (
            "/panel/integrations/nope",
            StatusCode::NOT_FOUND,
            "unknown_integration",
        ),
        ("/panel/no-such-page", StatusCode::NOT_FOUND, "not_found"),
    ];
    for (path, status, code) in cases {
        let r = c.get(path).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(
            r.header("content-type")
                .unwrap_or_default()
                .starts_with("text/html")
                || code.is_empty(),
            "{path}"
        );
        if !code.is_empty() {
            assert!(
                r.body.contains(&format!("<code>{code}</code>")),
                "{path}: {}",
                r.body
            );
            assert!(r.body.contains("role=\"alert\""), "{path}");
        }
        assert!(r.header("content-security-policy").is_some(), "{path}");
    }
    // An htmx request gets the error as a partial aimed at the message area.
    let r = c
        .get_htmx("/panel/projects/demo/preview?agent_type=nope")
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.header("hx-retarget"), Some("#flash"));
    assert!(!r.body.contains("<html"));
    assert!(r.body.contains("unknown_agent_type"));
}

#[tokio::test]
async fn a_project_whose_stored_document_does_not_load_is_listed_and_explained() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let path = fixture.ctx.store.project_path("demo").unwrap();
    std::fs::write(&path, "schema_version: 2\nproject:\n  name: [unclosed\n").unwrap();
    // Listed, with the store's reason, so that an admin finds it.
    let list = c.get("/panel/projects").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(
        list.body.contains("does not load (parse_error)"),
        "{}",
        list.body
    );
    // Its page says what is wrong and where, under the API's code, not as the admin's fault.
    let page = c.get("/panel/projects/demo").await;
    assert_eq!(page.status, StatusCode::CONFLICT, "{}", page.body);
    assert!(
        page.body.contains("<code>stored_document_invalid</code>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("at line 3, column 9"), "{}", page.body);
    assert!(
        page.body.contains("projects&#x2f;demo.yaml"),
        "{}",
        page.body
    );
}

/// A project whose stored document does not load is repaired from its page: the editor starts
/// from the newest kept revision, a refused replacement comes back with its problem and the
/// text as it was, and a good one replaces the document, which loads again.
#[tokio::test]
async fn a_project_whose_stored_document_does_not_load_is_repaired_from_its_page() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let good = fixture.ctx.store.load("demo").unwrap().document;
    let revision = good.revision;
    let path = fixture.ctx.store.project_path("demo").unwrap();
    std::fs::write(&path, "schema_version: 2\nproject:\n  name: [unclosed\n").unwrap();

    let page = c.get("/panel/projects/demo").await;
    assert_eq!(page.status, StatusCode::CONFLICT, "{}", page.body);
    assert!(
        page.body.contains("<code>stored_document_invalid</code>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("id=\"repair\""), "{}", page.body);
    assert!(
        page.body
            .contains(&format!("<span id=\"kept-revision\">{revision}</span>")),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("name=\"base_revision\" value=\"{revision}\"")),
        "{}",
        page.body
    );
    let kept_yaml = bridle_rules::to_yaml(&good).unwrap();
    let first_line = kept_yaml
        .lines()
        .find(|l| l.starts_with("  name:"))
        .unwrap();
    assert!(page.body.contains(first_line), "{}", page.body);

    // A replacement that is itself broken: back with its problem and the text as sent.
    let base = revision.to_string();
    let r = c
        .post(
            "/panel/projects/demo/repair",
            &[
                ("base_revision", &base),
                ("yaml", "project: [still broken\n"),
                ("summary", ""),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("<code>invalid_yaml</code>"), "{}", r.body);
    assert!(r.body.contains("project: [still broken"), "{}", r.body);
    // A stale base: back with the conflict, nothing written.
    let stale = (revision - 1).to_string();
    let r = c
        .post(
            "/panel/projects/demo/repair",
            &[
                ("base_revision", &stale),
                ("yaml", &kept_yaml),
                ("summary", ""),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(
        r.body.contains("<code>revision_conflict</code>"),
        "{}",
        r.body
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "schema_version: 2\nproject:\n  name: [unclosed\n"
    );

    let r = c
        .post(
            "/panel/projects/demo/repair",
            &[
                ("base_revision", &base),
                ("yaml", &kept_yaml),
                ("summary", "restore"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let next = revision + 1;
    assert_eq!(
        r.location(),
        format!("/panel/projects/demo?notice=repaired&revision={next}")
    );
    let page = c.get(r.location()).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains(&format!(
            "The stored document was replaced (revision {next}); it loads again."
        )),
        "{}",
        page.body
    );
    assert_eq!(
        fixture.ctx.store.load("demo").unwrap().document.revision,
        next
    );

    // A watcher sees what is wrong, and no form to replace it.
    std::fs::write(&path, "schema_version: 2\nproject:\n  name: [unclosed\n").unwrap();
    let mut watcher = Client::new(fixture.router(panel_config()));
    watcher.login(WATCHER).await;
    let page = watcher.get("/panel/projects/demo").await;
    assert_eq!(page.status, StatusCode::CONFLICT, "{}", page.body);
    assert!(page.body.contains("<code>stored_document_invalid</code>"));
    assert!(!page.body.contains("id=\"repair\""), "{}", page.body);
}

#[tokio::test]
async fn cross_site_posts_are_refused_and_change_nothing() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let id = fixture.propose_guardrail("csrf");
    let path = format!("/panel/queue/{id}/approve");
    for site in [
        Caller::CrossSite,
        Caller::ForeignOriginOnly,
        Caller::Origin("null".into()),
    ] {
        let r = c.post_as(&path, &[], site, false).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
        assert!(r.body.contains("cross_site_request"));
        assert_eq!(fixture.proposal_status(id), "pending");
    }
    // Log-in is checked too (no log-in CSRF).
    let r = c
        .post_as(
            "/panel/login",
            &[("token", ALICE)],
            Caller::CrossSite,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.set_cookies().is_empty());
    // Same-site but another origin (another port of this host) is refused as well.
    let r = c
        .send(
            axum::http::Request::builder()
                .method("POST")
                .uri(&path)
                .header("host", &c.host)
                .header("cookie", c.cookie.as_deref().unwrap())
                .header("sec-fetch-site", "same-site")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(fixture.proposal_status(id), "pending");
    // An Origin that is this host passes without fetch metadata; so does a non-browser client.
    let own = format!("http://{}", c.host);
    let r = c.post_as(&path, &[], Caller::Origin(own), false).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let id2 = fixture.propose_guardrail("csrf-2");
    let r = c
        .post_as(
            &format!("/panel/queue/{id2}/approve"),
            &[],
            Caller::NoHeaders,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);

    // A reverse proxy's public origin is accepted once configured.
    let mut proxied =
        Client::new(fixture.router(panel_config().allow_origin("https://bridle.example")));
    proxied.login(ALICE).await;
    let id3 = fixture.propose_guardrail("csrf-3");
    let r = proxied
        .post_as(
            &format!("/panel/queue/{id3}/approve"),
            &[],
            Caller::Origin("https://bridle.example".into()),
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
}

#[tokio::test]
async fn watchers_and_a_read_only_panel_change_nothing() {
    let fixture = Fixture::new().await;
    let id = fixture.propose_guardrail("read-only");
    let mut watcher = Client::new(fixture.router(panel_config()));
    watcher.login(WATCHER).await;
    let queue = watcher.get("/panel/queue").await;
    assert!(queue.body.contains("Read-only"));
    assert!(!queue.body.contains(&format!("id=\"approve-{id}\"")));
    let project = watcher.get("/panel/projects/demo").await;
    assert!(!project.body.contains("id=\"editor\""));
    assert!(project.body.contains("class=\"yaml\""));
    let r = watcher
        .post(&format!("/panel/queue/{id}/approve"), &[])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.body.contains("read_only"));
    assert_eq!(fixture.proposal_status(id), "pending");
    // Watchers can still log out.
    let r = watcher.post("/panel/logout", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);

    let mut alice = Client::new(fixture.read_only_router(PanelConfig::default()));
    alice.login(ALICE).await;
    let r = alice.post(&format!("/panel/queue/{id}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(fixture.proposal_status(id), "pending");
}

#[tokio::test]
async fn log_out_ends_the_session() {
    let fixture = Fixture::new().await;
    let mut c = signed_in(&fixture).await;
    assert_eq!(c.get("/panel").await.status, StatusCode::OK);
    let r = c.post("/panel/logout", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/panel/login?signed_out=1");
    assert!(r.set_cookies().iter().any(|c| c.contains("Max-Age=0")));
    // The old cookie no longer opens anything.
    let r = c.get("/panel").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.location().starts_with("/panel/login"));
    let page = c.get("/panel/login?signed_out=1").await;
    assert!(page.body.contains("You are signed out."));
    // A log-in page with a live session goes straight on.
    c.login(BOB).await;
    let r = c.get("/panel/login").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    c.cookie = None;
    // Log-out without a session is harmless.
    assert_eq!(
        c.post("/panel/logout", &[]).await.status,
        StatusCode::SEE_OTHER
    );
}

/// Logging in again from a browser that holds a session replaces its cookie; the session the
/// old cookie named ends with it, instead of living on server-side until it is idle.
#[tokio::test]
async fn logging_in_again_ends_the_session_it_replaces() {
    let fixture = Fixture::new().await;
    let mut c = signed_in(&fixture).await;
    let old = c.cookie.clone().expect("a session cookie");
    // The form posts with the old cookie, as a browser would.
    c.login(BOB).await;
    let new = c.cookie.clone().expect("a session cookie");
    assert_ne!(old, new, "a new session id at log-in");
    assert_eq!(c.get("/panel").await.status, StatusCode::OK);
    c.cookie = Some(old);
    let r = c.get("/panel").await;
    assert_eq!(
        r.status,
        StatusCode::SEE_OTHER,
        "the replaced session is over"
    );
    assert!(r.location().starts_with("/panel/login"));
    // A failed log-in ends nothing.
    c.cookie = Some(new);
    let r = c
        .post("/panel/login", &[("token", "nope"), ("next", "/panel")])
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(c.get("/panel").await.status, StatusCode::OK);
}

/// A page of another site on the same host (another port of 127.0.0.1: cookies do not tell
/// ports apart) can plant a `bridle-panel` cookie with a longer path, which the browser then
/// sends before the real one. The panel finds the live session among the cookies of that
/// name, so the planted one locks nobody out, and log-out still ends the real session.
#[tokio::test]
async fn a_planted_cookie_of_the_same_name_does_not_hide_the_session() {
    let fixture = Fixture::new().await;
    let mut c = signed_in(&fixture).await;
    let real = c.cookie.clone().unwrap();
    c.cookie = Some(format!("bridle-panel=planted-by-another-port; {real}"));
    let r = c.get("/panel/queue").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.location());
    let r = c.get("/panel/login").await;
    assert_eq!(
        r.status,
        StatusCode::SEE_OTHER,
        "a signed-in log-in page goes on"
    );
    let r = c.post("/panel/logout", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    c.cookie = Some(real);
    let r = c.get("/panel/queue").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "log-out ended the session");
    assert!(r.location().starts_with("/panel/login"));
}

#[tokio::test]
async fn a_revoked_credential_ends_the_session_on_the_next_request() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    assert_eq!(c.get("/panel/queue").await.status, StatusCode::OK);
    fixture.admins.revoke(ALICE);
    let r = c.get("/panel/queue").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location(), "/panel/login");
    assert!(r.set_cookies().iter().any(|c| c.contains("Max-Age=0")));
    // The session is gone, not just refused once.
    let r = c.get("/panel/integrations").await;
    assert!(r.location().starts_with("/panel/login?next="));
}

#[tokio::test]
async fn an_idle_session_expires() {
    let fixture = Fixture::new().await;
    let mut c = Client::new(fixture.router(
        panel_config().session_lifetimes(Duration::from_secs(3600), Duration::from_millis(1)),
    ));
    c.login(ALICE).await;
    // Wait until the idle time has surely passed (a deadline, not an assertion on time).
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(5) {
        tokio::task::yield_now().await;
    }
    let r = c.get("/panel").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_base_path_is_configurable() {
    let fixture = Fixture::new().await;
    let mut c = Client::new(fixture.router(panel_config().base_path("/bridle/panel")));
    let r = c
        .post(
            "/bridle/panel/login",
            &[("token", ALICE), ("next", "/bridle/panel/queue")],
        )
        .await;
    assert_eq!(r.location(), "/bridle/panel/queue");
    c.cookie = r.session_cookie();
    let page = c.get("/bridle/panel/queue").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        asset_path(&page.body, ".css").starts_with("/bridle/panel/assets/panel-"),
        "{}",
        page.body
    );
    assert!(page.body.contains(r#"href="/bridle/panel/projects""#));
    // The API is still where it was, and the old base path is not the panel.
    assert_ne!(c.get("/panel").await.status, StatusCode::OK);
    assert!(
        bridle_gateway::panel::router(PanelConfig::default().base_path("panel/"), &fixture.state())
            .is_err()
    );
}

#[tokio::test]
async fn areas_the_api_does_not_offer_say_so() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    // On an admin API without these resources the page names the missing endpoint; the
    // overview still shows everything else.
    for path in [
        "/panel/agents",
        "/panel/sessions",
        "/panel/secrets",
        "/panel/audit",
    ] {
        let r = c.get(path).await;
        if r.status == StatusCode::OK {
            continue; // the API offers it
        }
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.body);
        assert!(
            r.body.contains("<code>unknown_route</code>"),
            "{path}: {}",
            r.body
        );
    }
    let r = c.get("/panel").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("Review queue"));
}
