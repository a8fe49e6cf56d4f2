//! The review queue's pages over real HTTP: walked with `next_cursor` under each filter, they
//! hold exactly the proposals the filter matches, in order, once each, whatever the page size
//! (the store filters and cuts each page); bad paging is 400 `invalid_query`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod admin_support;

use admin_support::{Api, json_ok, problem};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bridle_rules::{ChangeRequest, Origin, Severity};
use reqwest::StatusCode;

/// Every id of the queue's pages under `query`, walked `limit` at a time.
async fn walk(api: &Api, query: &str, limit: usize) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/queue?limit={limit}&{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let body = json_ok(api.get(&path).send().await.unwrap(), StatusCode::OK).await;
        let items = body["items"].as_array().unwrap();
        assert!(items.len() <= limit, "{path}: {body}");
        ids.extend(items.iter().map(|p| p["id"].as_u64().unwrap()));
        match body["next_cursor"].as_str() {
            Some(next) => {
                assert_eq!(items.len(), limit, "a page before the last is full: {body}");
                cursor = Some(next.to_string());
            }
            None => return ids,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_under_each_filter_hold_what_it_matches() {
    let api = Api::start().await;
    let store = &api.ctx.store;
    let mut ids = Vec::new();
    for i in 0..7 {
        let by = if i % 2 == 0 { "claude" } else { "codex" };
        let p = store
            .propose(
                "demo",
                &Origin::agent(by, None),
                &ChangeRequest::Guardrail {
                    id: format!("paged-{i}"),
                    statement: format!("Statement {i} of the paged queue."),
                    severity: Severity::Guidance,
                    applies_to: vec!["all_agents".into()],
                },
                None,
            )
            .unwrap();
        ids.push(p.id);
    }
    store
        .queue_vendor_guidance(
            "demo",
            "claude",
            "guide.md",
            "- Always run the tests before you commit.\n",
        )
        .unwrap();
    store.approve(ids[1], "alice").unwrap();
    store.reject(ids[2], "alice", "not now").unwrap();

    let all = store.queue(None, true).unwrap();
    let matching = |f: &dyn Fn(&bridle_rules::Proposal) -> bool| -> Vec<u64> {
        all.iter().filter(|p| f(p)).map(|p| p.id).collect()
    };
    let pending = bridle_rules::ProposalStatus::Pending;
    let cases: Vec<(&str, Vec<u64>)> = vec![
        ("", matching(&|p| p.status == pending)),
        ("status=all", matching(&|_| true)),
        (
            "status=approved",
            matching(&|p| p.status == bridle_rules::ProposalStatus::Approved),
        ),
        (
            "status=all&source=vendor",
            matching(&|p| p.origin.source == bridle_rules::Source::Vendor),
        ),
        ("status=all&source=user", Vec::new()),
        (
            "proposed_by=codex",
            matching(&|p| p.status == pending && p.origin.proposed_by == "codex"),
        ),
        (
            "project=demo&status=all&proposed_by=claude",
            matching(&|p| p.project == "demo" && p.origin.proposed_by == "claude"),
        ),
        ("project=elsewhere", Vec::new()),
    ];
    for (query, expected) in cases {
        for limit in [1, 2, 3, 500] {
            assert_eq!(
                walk(&api, query, limit).await,
                expected,
                "{query} limit {limit}"
            );
        }
    }

    // A cursor past every id (above what the databases store) is an empty last page.
    let past = URL_SAFE_NO_PAD.encode(u64::MAX.to_string());
    let body = json_ok(
        api.get(&format!("/queue?status=all&cursor={past}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(body["items"].as_array().unwrap().len(), 0, "{body}");
    assert!(body.get("next_cursor").is_none(), "{body}");
    for bad in [
        "limit=0",
        "limit=501",
        "cursor=%21%21",
        "status=maybe",
        "source=robot",
    ] {
        problem(
            api.get(&format!("/queue?{bad}")).send().await.unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_query",
        )
        .await;
    }
    api.stop().await;
}

/// A proposal this build cannot read (a newer build sharing the database wrote it) is left
/// out of the queue's pages, and asking for it, or deciding it, is 409 `unreadable_record`,
/// not a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_proposal_is_left_out_and_named_409() {
    let api = Api::start().await;
    let origin = Origin::agent("claude", None);
    let mut ids = Vec::new();
    for id in ["readable", "from-a-newer-build"] {
        let change = ChangeRequest::Guardrail {
            id: id.into(),
            statement: format!("Statement {id}."),
            severity: Severity::Guidance,
            applies_to: vec!["all_agents".into()],
        };
        ids.push(
            api.ctx
                .store
                .propose("demo", &origin, &change, None)
                .unwrap()
                .id,
        );
    }
    let db = rusqlite::Connection::open(api.tmp.path().join("bridle.db")).unwrap();
    let changed = db
        .execute(
            r#"UPDATE proposals SET change = '{"kind":"from_a_newer_build"}' WHERE id = ?1"#,
            [i64::try_from(ids[1]).unwrap()],
        )
        .unwrap();
    assert_eq!(changed, 1);

    assert_eq!(walk(&api, "status=pending", 10).await, vec![ids[0]]);
    let resp = api.get(&format!("/queue/{}", ids[1])).send().await.unwrap();
    problem(resp, StatusCode::CONFLICT, "unreadable_record").await;
    let resp = api
        .post(&format!("/queue/{}/approve", ids[1]))
        .send()
        .await
        .unwrap();
    problem(resp, StatusCode::CONFLICT, "unreadable_record").await;
    api.stop().await;
}
