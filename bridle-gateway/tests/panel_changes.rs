//! The web panel's changes at the HTML level (`oneshot` through the panel and the admin API):
//! the review queue, scope tickets, and editing a project's rules (diff before save, YAML errors
//! with line and column, the conflict view on a stale revision, new projects).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use axum::http::StatusCode;
use panel_support::{Fixture, signed_in};

#[tokio::test]
async fn the_queue_approves_and_rejects_with_provenance() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let a = fixture.propose_guardrail("approve-me");
    let b = fixture.propose_guardrail("reject-me");
    let d = fixture.propose_guardrail("htmx-me");
    let before = fixture.revision();

    let detail = c.get(&format!("/panel/queue/{a}")).await;
    assert!(detail.body.contains("claude"));
    assert!(detail.body.contains("sess-1"));
    assert!(detail.body.contains("d-add"), "the diff: {}", detail.body);
    assert!(detail.body.contains("approve-me"));

    let r = c.post(&format!("/panel/queue/{a}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        r.location()
            .starts_with(&format!("/panel/queue?notice=approved&id={a}"))
    );
    assert_eq!(fixture.proposal_status(a), "approved");
    assert_eq!(fixture.revision(), before + 1);
    let list = c.get(r.location()).await;
    assert!(
        list.body
            .contains(&format!("Proposal #{a} approved (revision {})", before + 1))
    );
    assert!(
        !list.body.contains(&format!("id=\"proposal-{a}\"")),
        "it left the pending list"
    );

    // Approving again: the API's conflict, shown as a page.
    let r = c.post(&format!("/panel/queue/{a}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(r.body.contains("already_decided"));

    // Rejecting needs a reason.
    let r = c
        .post(&format!("/panel/queue/{b}/reject"), &[("reason", "  ")])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.body.contains("give a reason"));
    assert_eq!(fixture.proposal_status(b), "pending");
    let r = c
        .post(
            &format!("/panel/queue/{b}/reject"),
            &[("reason", "too broad")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let p = fixture.ctx.store.proposal(b).unwrap();
    assert_eq!(p.status.as_str(), "rejected");
    assert_eq!(p.decision_note.as_deref(), Some("too broad"));
    assert_eq!(p.decided_by.as_deref(), Some("admin:alice@panel"));

    // Through htmx: the row comes back decided.
    let r = c.post_htmx(&format!("/panel/queue/{d}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body.starts_with(&format!("<tr id=\"proposal-{d}\"")),
        "{}",
        r.body
    );
    assert!(r.body.contains("approved"));
    assert!(!r.body.contains("<html"));
    // An htmx error goes to the message area.
    let r = c.post_htmx(&format!("/panel/queue/{d}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.header("hx-retarget"), Some("#flash"));
    let r = c
        .post_htmx("/panel/queue/999/reject", &[("reason", "x")])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Decided ones show with their decision.
    let r = c.get("/panel/queue?status=rejected").await;
    assert!(r.body.contains("too broad"));
}

#[tokio::test]
async fn scope_tickets_are_approved_and_denied() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let a = fixture.request_scope("push to main");
    let b = fixture.request_scope("delete a branch");
    let r = c
        .post(&format!("/panel/scope/{a}/approve"), &[("note", "once")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let t = fixture.ctx.store.scope_ticket(a).unwrap();
    assert_eq!(t.status, "approved");
    assert_eq!(t.note.as_deref(), Some("once"));
    let r = c
        .post_htmx(&format!("/panel/scope/{b}/deny"), &[("note", "")])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains(&format!("ticket-{b}")) && r.body.contains("denied"));
    assert!(fixture.ctx.store.scope_ticket(b).unwrap().note.is_none());
    let r = c.post(&format!("/panel/scope/{b}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let r = c.get("/panel/scope?status=all").await;
    assert!(r.body.contains("push to main") && r.body.contains("once"));
}

#[tokio::test]
async fn editing_rules_reviews_a_diff_then_saves() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let doc = fixture.ctx.store.load("demo").unwrap().document;
    let yaml = bridle_rules::to_yaml(&doc).unwrap();
    let rev = doc.revision.to_string();
    let edited = yaml.replacen("name: Demo", "name: Demo edited", 1);
    assert_ne!(edited, yaml);

    let r = c
        .post(
            "/panel/projects/demo/review",
            &[
                ("yaml", &edited.replace('\n', "\r\n")),
                ("base_revision", &rev),
                ("summary", "rename"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body
            .contains(r#"<span class="d-add">+  name: Demo edited</span>"#)
            || r.body.contains("+name: Demo edited")
            || r.body.contains("Demo edited")
    );
    assert!(r.body.contains("d-del"));
    assert!(r.body.contains("id=\"save\""));

    // Unchanged text: nothing to save.
    let r = c
        .post(
            "/panel/projects/demo/review",
            &[("yaml", &yaml), ("base_revision", &rev)],
        )
        .await;
    assert!(r.body.contains("nothing to save"));
    assert!(!r.body.contains("id=\"save\""));

    let r = c
        .post(
            "/panel/projects/demo/save",
            &[
                ("yaml", &edited),
                ("base_revision", &rev),
                ("summary", "rename"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        format!(
            "/panel/projects/demo?notice=saved&revision={}",
            doc.revision + 1
        )
    );
    assert_eq!(
        fixture
            .ctx
            .store
            .load("demo")
            .unwrap()
            .document
            .project
            .name,
        "Demo edited"
    );
    let page = c.get(r.location()).await;
    assert!(
        page.body
            .contains(&format!("Saved (revision {}).", doc.revision + 1))
    );
    assert!(page.body.contains("admin:alice@panel"));
    assert!(page.body.contains("rename"));
}

#[tokio::test]
async fn a_yaml_error_comes_back_with_line_and_column() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let rev = fixture.revision().to_string();
    let broken = "schema_version: 1\nproject:\n  name: [unclosed\n";
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[("yaml", broken), ("base_revision", &rev)],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("invalid_yaml"), "{}", r.body);
    assert!(r.body.contains("line "), "{}", r.body);
    assert!(r.body.contains("column "), "{}", r.body);
    // The text is kept in the editor, escaped.
    assert!(r.body.contains("name: [unclosed"));
    assert_eq!(fixture.revision().to_string(), rev);

    // A document that parses but fails a check.
    let invalid = bridle_rules::to_yaml(&fixture.ctx.store.load("demo").unwrap().document)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("schema_version:") {
                "schema_version: 999"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[("yaml", &invalid), ("base_revision", &rev)],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.body.contains("schema_too_new"), "{}", r.body);

    // HTML in the text stays text.
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[
                ("yaml", "<script>alert(1)</script>"),
                ("base_revision", &rev),
            ],
        )
        .await;
    assert!(!r.body.contains("<script>alert(1)</script>"));
    assert!(r.body.contains("&lt;script&gt;"));
    // A form without its fields.
    let r = c.post("/panel/projects/demo/save", &[("yaml", "x")]).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.body.contains("invalid_form"));
}

#[tokio::test]
async fn a_stale_save_shows_the_conflict_and_resolves_on_the_new_revision() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let doc = fixture.ctx.store.load("demo").unwrap().document;
    let base = doc.revision;
    let yaml = bridle_rules::to_yaml(&doc).unwrap();
    // Bob saves first, through the API.
    let mut theirs = doc.clone();
    theirs.project.overview = "Bob's overview.".into();
    let bob = fixture
        .ctx
        .store
        .save_edit("demo", &theirs, base, "admin:bob@api", "bob's edit")
        .unwrap();
    assert_eq!(bob, base + 1);

    let mine = yaml.replacen("name: Demo", "name: Demo by alice", 1);
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[("yaml", &mine), ("base_revision", &base.to_string())],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(r.body.contains("revision_conflict"));
    assert!(r.body.contains(&format!("id=\"current-revision\">{bob}<")));
    assert!(
        r.body.contains("Bob&#x27;s overview.") || r.body.contains("Bob's overview."),
        "{}",
        r.body
    );
    assert!(r.body.contains("Demo by alice"));
    assert!(
        r.body
            .contains(&format!(r#"name="base_revision" value="{bob}""#))
    );
    assert_eq!(fixture.revision(), bob, "nothing of alice's was saved");

    // Reviewing against the old revision goes to the conflict view as well.
    let r = c
        .post(
            "/panel/projects/demo/review",
            &[("yaml", &mine), ("base_revision", &base.to_string())],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);

    // Resolve: alice takes Bob's overview into her edit and saves on the new revision.
    let current = bridle_rules::to_yaml(&fixture.ctx.store.load("demo").unwrap().document).unwrap();
    let merged = current.replacen("name: Demo", "name: Demo by alice", 1);
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[("yaml", &merged), ("base_revision", &bob.to_string())],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let now = fixture.ctx.store.load("demo").unwrap().document;
    assert_eq!(now.revision, bob + 1);
    assert_eq!(now.project.name, "Demo by alice");
    assert_eq!(now.project.overview, "Bob's overview.");
}

#[tokio::test]
async fn projects_are_created_with_the_apis_checks() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let list = c.get("/panel/projects").await;
    assert!(list.body.contains("/panel/projects/demo"));
    assert!(list.body.contains("schema_version"), "the starter document");
    let yaml = bridle_rules::to_yaml(&bridle_rules::RulesDocument::new("Second")).unwrap();
    let r = c
        .post("/panel/projects", &[("name", "second"), ("yaml", &yaml)])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location(), "/panel/projects/second?notice=created");
    assert!(c.get(r.location()).await.body.contains("Project created."));
    let r = c
        .post("/panel/projects", &[("name", "second"), ("yaml", &yaml)])
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(
        r.body.contains(r#"value="second""#),
        "the form keeps its values: {}",
        r.body
    );
    let r = c
        .post("/panel/projects", &[("name", "Bad Name"), ("yaml", &yaml)])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.body.contains("invalid_name"));
    let filtered = c.get("/panel/projects?q=sec").await;
    assert!(filtered.body.contains("/panel/projects/second"));
    assert!(!filtered.body.contains("/panel/projects/demo\""));
}

#[tokio::test]
async fn bulk_decisions_report_each_outcome_and_one_failure_hides_none() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let a = fixture.propose_guardrail("bulk-a");
    // A proposal that no longer applies: a person added its guardrail by hand meanwhile (a
    // second pending proposal of one guardrail id is refused when proposed).
    let twin = fixture.propose_guardrail("bulk-twin");
    let by_hand = fixture.ctx.store.preview(twin, "test").unwrap();
    fixture
        .ctx
        .store
        .save_edit(
            "demo",
            &by_hand,
            fixture.revision(),
            "test",
            "bulk-twin by hand",
        )
        .unwrap();
    let decided = fixture.propose_guardrail("bulk-decided");
    let b = fixture.propose_guardrail("bulk-b");
    let r = c
        .post(
            &format!("/panel/queue/{decided}/reject"),
            &[("reason", "earlier")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);

    // The list offers the bulk form, and a labelled checkbox per pending row.
    let list = c.get("/panel/queue").await;
    assert!(
        list.body
            .contains(r#"<form method="post" action="/panel/queue/bulk" id="bulk""#)
    );
    for id in [a, twin, b] {
        assert!(list.body.contains(&format!(
            r#"form="bulk" name="ids" value="{id}" id="select-{id}""#
        )));
        assert!(list.body.contains(&format!(r#"<label for="select-{id}""#)));
    }

    let before = fixture.revision();
    let (sa, st, sd, sb) = (
        a.to_string(),
        twin.to_string(),
        decided.to_string(),
        b.to_string(),
    );
    let r = c
        .post(
            "/panel/queue/bulk",
            &[
                ("ids", sa.as_str()),
                ("ids", st.as_str()),
                ("ids", sd.as_str()),
                ("ids", sb.as_str()),
                ("ids", sa.as_str()),
                ("action", "approve"),
                ("reason", ""),
                ("status", "pending"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // Each selected proposal once, in order, with its own outcome.
    let outcome = |id: u64| {
        let at = r.body.find(&format!(r#"id="outcome-{id}""#)).unwrap();
        r.body[at..at + r.body[at..].find("</li>").unwrap()].to_string()
    };
    assert!(outcome(a).contains("approved"), "{}", outcome(a));
    assert!(outcome(a).contains(&format!("revision {}", before + 1)));
    assert!(outcome(twin).contains("not decided"), "{}", outcome(twin));
    assert!(
        outcome(decided).contains("already_decided"),
        "{}",
        outcome(decided)
    );
    assert!(outcome(b).contains("approved"), "{}", outcome(b));
    assert_eq!(r.body.matches(&format!(r#"id="outcome-{a}""#)).count(), 1);
    let order: Vec<usize> = [a, twin, decided, b]
        .iter()
        .map(|id| r.body.find(&format!(r#"id="outcome-{id}""#)).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "in the order selected"
    );
    assert_eq!(fixture.proposal_status(a), "approved");
    assert_eq!(fixture.proposal_status(b), "approved");
    assert_eq!(
        fixture.proposal_status(twin),
        "pending",
        "{}",
        outcome(twin)
    );
    assert_eq!(fixture.proposal_status(decided), "rejected");
    // The list below shows what is still pending.
    assert!(r.body.contains(&format!(r#"id="proposal-{twin}""#)));
    assert!(!r.body.contains(&format!(r#"id="proposal-{a}""#)));

    // Bulk reject with one reason.
    let r = c
        .post(
            "/panel/queue/bulk",
            &[
                ("ids", st.as_str()),
                ("action", "reject"),
                ("reason", "duplicate"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(outcome_of(&r.body, twin).contains("rejected"));
    assert_eq!(fixture.proposal_status(twin), "rejected");
}

fn outcome_of(body: &str, id: u64) -> String {
    let at = body.find(&format!(r#"id="outcome-{id}""#)).unwrap();
    body[at..at + body[at..].find("</li>").unwrap()].to_string()
}

#[tokio::test]
async fn bad_bulk_forms_decide_nothing() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let a = fixture.propose_guardrail("bulk-bad");
    let sa = a.to_string();
    let too_many: Vec<String> = (1..=201).map(|i| i.to_string()).collect();
    let mut many: Vec<(&str, &str)> = too_many.iter().map(|i| ("ids", i.as_str())).collect();
    many.push(("action", "approve"));
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("action", "approve")], "select at least one proposal"),
        (
            vec![("ids", sa.as_str()), ("action", "reject"), ("reason", "  ")],
            "give a reason",
        ),
        (
            vec![("ids", sa.as_str()), ("action", "delete")],
            "is not a bulk action",
        ),
        (vec![("ids", sa.as_str())], "is not a bulk action"),
        (
            vec![("ids", "1; drop"), ("action", "approve")],
            "is not a proposal number",
        ),
        (many, "at most 200 proposals"),
    ];
    for (form, says) in cases {
        let r = c.post("/panel/queue/bulk", &form).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{says}");
        assert!(r.body.contains(says), "{says}: {}", r.body);
        assert!(r.body.contains("invalid_form"));
    }
    // A bulk form over the body limit is the panel's 413 page, as every other form's is.
    let reason = "x".repeat(3 * 1024 * 1024);
    let r = c
        .post(
            "/panel/queue/bulk",
            &[
                ("ids", sa.as_str()),
                ("action", "reject"),
                ("reason", reason.as_str()),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        r.body.contains("data-code=\"body_too_large\""),
        "{}",
        r.body
    );
    // Unknown proposals are outcomes, not a failed page.
    let r = c
        .post(
            "/panel/queue/bulk",
            &[("ids", "999999"), ("action", "approve")],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(outcome_of(&r.body, 999_999).contains("not decided"));
    assert_eq!(fixture.proposal_status(a), "pending");
}

#[tokio::test]
async fn a_watcher_has_no_bulk_form_and_cannot_post_one() {
    let fixture = Fixture::new().await;
    let a = fixture.propose_guardrail("bulk-watched");
    let mut w = panel_support::Client::new(fixture.router(panel_support::panel_config()));
    w.login(panel_support::WATCHER).await;
    let list = w.get("/panel/queue").await;
    assert!(!list.body.contains("/panel/queue/bulk"));
    assert!(!list.body.contains(r#"name="ids""#));
    let sa = a.to_string();
    let r = w
        .post(
            "/panel/queue/bulk",
            &[("ids", sa.as_str()), ("action", "approve")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(fixture.proposal_status(a), "pending");
}

#[tokio::test]
async fn guardrails_as_forms_go_through_the_review_and_the_revision_check() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let page = c.get("/panel/projects/demo").await;
    assert_eq!(page.status, StatusCode::OK);
    for label in ["g-id", "g-statement", "g-severity", "g-applies"] {
        assert!(
            page.body.contains(&format!(r#"<label for="{label}">"#)),
            "{label}"
        );
    }
    let before = fixture.revision();

    // Adding shows the diff; nothing is saved yet.
    let r = c
        .post(
            "/panel/projects/demo/guardrails",
            &[
                ("id", "form-guardrail"),
                ("statement", "Run the tests before every commit."),
                ("severity", "guidance"),
                ("applies_to", "claude, codex"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains("d-add"), "{}", r.body);
    assert!(r.body.contains("form-guardrail"));
    assert!(r.body.contains("guardrail form-guardrail added"));
    assert_eq!(fixture.revision(), before, "a form never saves by itself");
    // The review page's own save form, as the browser would send it.
    let yaml = form_field(&r.body, "yaml");
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[
                ("yaml", yaml.as_str()),
                ("base_revision", &before.to_string()),
                ("summary", "guardrail form-guardrail added"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(fixture.revision(), before + 1);
    let doc = fixture.ctx.store.load("demo").unwrap().document;
    let g = doc
        .guardrails
        .iter()
        .find(|g| g.id == "form-guardrail")
        .unwrap();
    assert_eq!(g.applies_to, ["claude", "codex"]);
    assert_eq!(g.severity.as_str(), "guidance");

    // Removing: reviewed, then saved against a revision someone else moved on: the conflict view.
    let r = c
        .post("/panel/projects/demo/guardrails/form-guardrail/remove", &[])
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains("d-del"));
    let yaml = form_field(&r.body, "yaml");
    let mut other = fixture.ctx.store.load("demo").unwrap().document;
    other.project.overview = "Changed meanwhile.".into();
    fixture
        .ctx
        .store
        .save_edit("demo", &other, other.revision, "admin:bob@api", "meanwhile")
        .unwrap();
    let r = c
        .post(
            "/panel/projects/demo/save",
            &[
                ("yaml", yaml.as_str()),
                ("base_revision", &(before + 1).to_string()),
                ("summary", "guardrail form-guardrail removed"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(
        fixture
            .ctx
            .store
            .load("demo")
            .unwrap()
            .document
            .guardrails
            .iter()
            .any(|g| g.id == "form-guardrail")
    );

    // Bad forms change nothing.
    for (form, says) in [
        (
            vec![("id", " "), ("statement", "x"), ("severity", "guidance")],
            "an id and a statement",
        ),
        (
            vec![("id", "x"), ("statement", "y"), ("severity", "loud")],
            "the severity is",
        ),
    ] {
        let r = c.post("/panel/projects/demo/guardrails", &form).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{says}");
        assert!(r.body.contains(says), "{says}");
    }
    let r = c
        .post("/panel/projects/demo/guardrails/no-such/remove", &[])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.body.contains("has no guardrail `no-such`"));
    let r = c
        .post(
            "/panel/projects/nope/guardrails",
            &[("id", "x"), ("statement", "y"), ("severity", "guidance")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// A form field's value from a page (a textarea's text or an input's value), unescaped.
fn form_field(body: &str, name: &str) -> String {
    let unescape = |s: &str| {
        s.replace("&#x2f;", "/")
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let at = body.find(&format!(r#"name="{name}""#)).expect("the field");
    let tag_start = body[..at].rfind('<').unwrap();
    if body[tag_start..].starts_with("<textarea") {
        let open_end = at + body[at..].find('>').unwrap() + 1;
        let close = open_end + body[open_end..].find("</textarea>").unwrap();
        return unescape(&body[open_end..close]);
    }
    let tag = &body[tag_start..at + body[at..].find('>').unwrap()];
    unescape(
        tag.split("value=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap(),
    )
}
