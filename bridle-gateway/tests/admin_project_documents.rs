//! A project document near the admin API's body limit, read back through every route that
//! loads and renders one on the blocking pool: the document as JSON and as YAML (with its
//! `ETag`), rendered for an agent type, and diffed against its first revision. The answers
//! keep their shape and agree with each other and with the store.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::{Api, json_ok};
use bridle_rules::Guardrail;
use reqwest::StatusCode;

/// Guardrails added to the demo project: a document of several hundred KiB.
const ADDED: usize = 2_000;

fn added_id(i: usize) -> String {
    format!("large-guardrail-{i:05}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_document_reads_renders_and_diffs_as_before() {
    let api = Api::start().await;
    let mut doc = api.ctx.store.load("demo").unwrap().document;
    let first = doc.revision;
    let template: Guardrail = doc.guardrails[0].clone();
    for i in 0..ADDED {
        let mut g = template.clone();
        g.id = added_id(i);
        g.statement = format!("Statement {i} of a large document, long enough to weigh something.");
        doc.guardrails.push(g);
    }
    let revision = api
        .ctx
        .store
        .save_edit("demo", &doc, first, "test", "a large document")
        .unwrap();

    // JSON, with the YAML beside it and the revision as the ETag.
    let r = api.get("/projects/demo").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()[reqwest::header::ETAG].to_str().unwrap(),
        format!("\"{revision}\"")
    );
    assert!(
        r.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let json = json_ok(r, StatusCode::OK).await;
    assert_eq!(json["project"], "demo");
    assert_eq!(json["revision"], revision);
    let guardrails = json["document"]["guardrails"].as_array().unwrap();
    assert_eq!(guardrails.len(), doc.guardrails.len());
    assert_eq!(guardrails.last().unwrap()["id"], added_id(ADDED - 1));
    let yaml_field = json["yaml"].as_str().unwrap().to_string();

    // YAML on request: the same text as the JSON's `yaml`.
    let r = api
        .get("/projects/demo")
        .header(reqwest::header::ACCEPT, "application/yaml")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap(),
        "application/yaml"
    );
    assert_eq!(
        r.headers()[reqwest::header::ETAG].to_str().unwrap(),
        format!("\"{revision}\"")
    );
    let yaml = r.text().await.unwrap();
    assert_eq!(yaml, yaml_field);
    assert!(yaml.len() > 200_000, "{} bytes", yaml.len());
    assert_eq!(
        yaml,
        bridle_rules::to_yaml(&doc_at(&api, revision)).unwrap()
    );

    // Rendered for an agent type: the renderer's own answer.
    let rendered = json_ok(
        api.get("/projects/demo/render/claude")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let expected = api
        .ctx
        .renderer
        .render("demo", &doc_at(&api, revision), "claude")
        .unwrap();
    assert_eq!(rendered["project"], "demo");
    assert_eq!(rendered["agent_type"], expected.agent);
    assert_eq!(rendered["revision"], revision);
    assert_eq!(rendered["path"], expected.path);
    assert_eq!(rendered["content"], expected.content);
    assert!(
        expected
            .content
            .contains(&format!("Statement {} of a large document", ADDED - 1))
    );

    // Diffed against the first revision: every added guardrail appears as added.
    let diff = json_ok(
        api.get(&format!("/projects/demo/diff?from={first}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(diff["project"], "demo");
    assert_eq!(diff["from"], first);
    assert_eq!(diff["to"], revision);
    let text = diff["diff"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("--- demo@{first}\n+++ demo@{revision}\n")),
        "{}",
        &text[..200.min(text.len())]
    );
    for i in [0, ADDED / 2, ADDED - 1] {
        assert!(
            text.lines()
                .any(|l| l.starts_with('+') && l.contains(&added_id(i))),
            "{} is not added in the diff",
            added_id(i)
        );
    }
    // The unknown cases keep their answers.
    let r = api
        .get("/projects/demo/render/no-such-agent")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = api
        .get(&format!("/projects/demo/diff?from={}", revision + 100))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = api.get("/projects/no-such-project").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    api.stop().await;
}

fn doc_at(api: &Api, revision: u64) -> bridle_rules::RulesDocument {
    api.ctx.store.document_at("demo", revision).unwrap()
}
