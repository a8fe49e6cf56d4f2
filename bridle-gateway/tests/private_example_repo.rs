//! A private example repository indexed through the gateway with a credential kept in the
//! vault, not in its URL: `memory.indexing.git_credentials` in `bridle.yaml` names the site and
//! the secret; the repository is served by git's own smart-HTTP server behind HTTP Basic
//! authentication on 127.0.0.1 (`kberg_testkit::git`). The index run
//! clones it, the vault records the use, and the secret reaches neither the run's events, the
//! rules document, the admin API's listings nor the audit log; after a rotation to a value the
//! host refuses, the next run fails `repo_unavailable` and the previous index stays.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;
use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::{Events, json_ok};
use bridle_gateway::vault::SecretValue;
use bridle_memory::{ConstantEmbedder, EmbeddedStore, MemoryService};
use kberg_testkit::git::PrivateGitHost;
use reqwest::StatusCode;
use serde_json::{Value, json};

const USER: &str = "bridle-bot";
const SECRET: &str = "canary-vault-git-secret-8Jd3Nq";
const WRONG: &str = "canary-wrong-git-secret-2Vb7Hc";

fn assert_clean(what: &str, text: &str) {
    for canary in [SECRET, WRONG] {
        assert!(!text.contains(canary), "{what} holds a canary:\n{text}");
    }
}

const INDEX: &str = "/projects/demo/patterns/retry/examples/private-retry/index";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_example_is_cloned_with_the_vaults_secret_and_the_secret_goes_nowhere_else() {
    let host = PrivateGitHost::start(
        USER,
        SECRET,
        &[(
            "retry.rs",
            "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
        )],
    );
    let site = format!("http://127.0.0.1:{}/team/", host.port);
    let url = format!("{site}app.git");
    let memory = format!(
        "memory:\n  embedder:\n    ollama: {{url: \"http://127.0.0.1:9\", model: m}}\n  indexing:\n    git_credentials:\n      - {{site: '{site}', username: {USER}, secret: team-git}}\n"
    );
    let gw = Gw::start_with_config(&memory, |b, dir, config| {
        let patterns = config
            .memory
            .as_ref()
            .unwrap()
            .to_config(dir, &config.secrets_path(dir))
            .unwrap()
            .patterns;
        b.memory(MemoryService::with(
            Arc::new(EmbeddedStore::open_in_memory().unwrap()),
            Arc::new(ConstantEmbedder::new(8)),
            patterns,
        ))
    })
    .await;
    gw.vault
        .create("team-git", &SecretValue::from(SECRET), "alice")
        .unwrap();
    for (path, body) in [
        (
            "/projects/demo/patterns",
            json!({"name": "retry", "description": "Retries with backoff."}),
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": url, "reference_tag": "private-retry"}),
        ),
    ] {
        json_ok(
            gw.post(path).json(&body).send().await.unwrap(),
            StatusCode::CREATED,
        )
        .await;
    }

    let mut events = Events::new(gw.post(INDEX).send().await.unwrap());
    let done = events.until("done").await;
    assert_eq!(done["report"]["reference_tag"], "private-retry", "{done}");
    assert_eq!(done["report"]["files"], 1, "{done}");
    assert!(gw.pattern_hits("retry%20backoff").await >= 1);
    assert_clean("the run's events", &done.to_string());

    // The vault recorded the use: which secret, for which site, for which example.
    let uses: Vec<_> = gw
        .vault
        .audit_log(0, 1_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "use")
        .collect();
    assert_eq!(uses.len(), 1, "{uses:?}");
    assert_eq!(uses[0].secret.as_deref(), Some("team-git"));
    assert_eq!(
        uses[0].upstream.as_deref(),
        Some(format!("git {site}").as_str())
    );
    assert_eq!(uses[0].request_id.as_deref(), Some("private-retry"));

    // Rotated to a value the host refuses: the next run fails clearly, and the index stays.
    gw.vault
        .rotate(
            "team-git",
            &SecretValue::from(WRONG),
            "alice",
            Duration::ZERO,
        )
        .unwrap();
    let failed = Events::new(gw.post(INDEX).send().await.unwrap())
        .until("error")
        .await;
    assert_eq!(failed["code"], "repo_unavailable", "{failed}");
    assert_clean("the failed run's events", &failed.to_string());
    assert!(
        gw.pattern_hits("retry%20backoff").await >= 1,
        "the previous index is searchable"
    );

    for path in ["/projects/demo", "/projects/demo/patterns", "/secrets"] {
        let body: Value = json_ok(gw.get(path).send().await.unwrap(), StatusCode::OK).await;
        assert_clean(path, &body.to_string());
    }
    assert_clean("the audit log", &gw.audit_export().await);
    gw.stop().await;
}
