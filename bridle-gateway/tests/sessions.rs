//! The live registry over real HTTP: a connected agent appears with its session, protocol and
//! self-reported client, its calls are counted, and an ended session is refused on its next
//! request.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::sessions::Generation;
use bridle_rules::{AgentCatalog, RulesStore};
use kberg_agent::{McpSurface, ToolSurface};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_counted_and_ended() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &demo_document(), "test")
        .unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    let sessions = gateway.context().sessions.clone();
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let url = bound.url();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));

    let token = std::fs::read_to_string(tmp.path().join("secrets/claude-token")).unwrap();
    let claude = McpSurface::connect_http_with_bearer(&url, token.trim())
        .await
        .unwrap();
    let r = claude
        .call("list_projects", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let r = claude
        .call(
            "approve_proposal",
            json!({"id": 1}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.is_error);

    let live = sessions.sessions();
    let mine: Vec<_> = live.iter().filter(|s| s.agent == "claude").collect();
    assert_eq!(mine.len(), 1, "{live:?}");
    let session = mine[0].clone();
    assert_eq!(session.generation, Generation::Stateful);
    assert_eq!(session.agent_type.as_deref(), Some("claude"));
    assert!(
        session.client_name.is_some(),
        "clientInfo recorded: {session:?}"
    );
    assert!(session.requests >= 3);
    let calls = sessions.calls("claude");
    assert_eq!((calls.made, calls.refused), (1, 1));

    // Ended by an operator: the next request on that session is refused.
    assert!(sessions.end(&session.id));
    let after = claude
        .call("list_projects", json!({}), CancellationToken::new())
        .await;
    match after {
        Err(_) => {}
        Ok(r) => assert!(r.is_error, "an ended session still served: {r:?}"),
    }
    assert!(sessions.session(&session.id).is_none());

    // A new connection works.
    let again = McpSurface::connect_http_with_bearer(&url, token.trim())
        .await
        .unwrap();
    assert!(!again.tools().await.unwrap().is_empty());

    stop.cancel();
    served.await.unwrap().unwrap();
}
