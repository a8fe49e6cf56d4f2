//! The gateway in front of a real third-party MCP server: the pinned `gitea-mcp` as a stdio
//! child per agent (its token in `GITEA_TOKEN`, from the agent's own secret), against the Gitea
//! REST stand-in, reached by agents over real HTTP with their Bridle tokens.
//!
//! The canary: claude's Gitea secret is a recognisable value. It must reach the stand-in on
//! every request claude's calls cause, and appear nowhere an agent or an operator reads: tool
//! lists, tool results and errors, resources, prompts, the gateway's log at every level (TRACE
//! captured through the gateway's own filter), and the upstream's echo of a rejected token
//! (scrubbed).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod support;

use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_rules::{AgentCatalog, ReadWrite, RulesStore};
use kberg_agent::{McpSurface, ToolResult, ToolSurface};
use kberg_testkit::eventually_async_ok;
use kberg_testkit::log::LogBuffer;
use serde_json::json;
use support::gitea_mcp;
use support::gitea_standin::GiteaStandIn;
use tokio_util::sync::CancellationToken;

const CANARY: &str = "canary-7f3a9c1e-gitea-secret-of-claude";
const CODEX_GITEA: &str = "0b9a8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b";
/// A token the stand-in rejects; Gitea echoes a rejected token in its error body.
const REJECTED: &str = "canary-rejected-5d1e-never-valid";

async fn call(s: &McpSurface, name: &str, args: serde_json::Value) -> ToolResult {
    s.call(name, args, CancellationToken::new())
        .await
        .expect("the surface answers")
}

fn text(r: &ToolResult) -> String {
    format!("{} {}", r.text, r.structured.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_secret_reaches_gitea_and_nothing_an_agent_or_a_log_sees() {
    let logs = LogBuffer::default();
    logs.install_global(bridle_gateway::logging::log_targets("trace"));

    let gitea = GiteaStandIn::start([(CANARY, "alice"), (CODEX_GITEA, "bob")]).await;
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(&format!(
        "upstreams:\n  gitea:\n    stdio:\n      command: '{}'\n      env: {{GITEA_URL: '{}', FASTMCP_CHECK_FOR_UPDATES: 'off', FASTMCP_LOG_LEVEL: INFO, COLUMNS: '1000'}}\n    credential:\n      env: GITEA_TOKEN\n      per_agent: {{claude: gitea-claude, codex: gitea-codex, gemini: gitea-gemini}}\n",
        gitea_mcp::program(),
        gitea.url()
    ));
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    for (name, value) in [
        ("gitea-claude", CANARY),
        ("gitea-codex", CODEX_GITEA),
        ("gitea-gemini", REJECTED),
    ] {
        std::fs::write(tmp.path().join("secrets").join(name), value).unwrap();
    }
    let mut doc = demo_document();
    let rw = |read, write| ReadWrite { read, write };
    doc.permissions.get_mut("claude").unwrap().gitea = rw(true, true);
    doc.permissions.get_mut("codex").unwrap().gitea = rw(true, false);
    doc.permissions.get_mut("gemini").unwrap().gitea = rw(true, false);
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &doc, "test")
        .unwrap();

    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .connect_timeout(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let offered = gateway
        .upstreams()
        .wait_offered("gitea", Duration::from_secs(90))
        .await;
    assert!(
        offered.contains(&"gitea__list_repos".to_string()),
        "{offered:?}"
    );
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let url = bound.url();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));

    let token = |agent: &str| {
        std::fs::read_to_string(tmp.path().join(format!("secrets/{agent}-token")))
            .unwrap()
            .trim()
            .to_string()
    };
    let claude = McpSurface::connect_http_with_bearer(&url, &token("claude"))
        .await
        .unwrap();
    let codex = McpSurface::connect_http_with_bearer(&url, &token("codex"))
        .await
        .unwrap();
    let gemini = McpSurface::connect_http_with_bearer(&url, &token("gemini"))
        .await
        .unwrap();

    let mut seen_by_agents = String::new();
    let listed = claude.tools().await.unwrap();
    seen_by_agents.push_str(&serde_json::to_string(&listed).unwrap());
    assert!(
        listed
            .iter()
            .any(|t| t.name == "gitea__list_repos" && t.read_only)
    );
    assert!(
        listed
            .iter()
            .any(|t| t.name == "gitea__create_issue" && !t.read_only)
    );

    // claude acts as alice, codex as bob: each child carries its agent's own token.
    let r = call(&claude, "gitea__get_server_info", json!({})).await;
    assert!(!r.is_error, "{r:?}");
    assert!(text(&r).contains("alice"), "{r:?}");
    seen_by_agents.push_str(&text(&r));
    let r = call(&codex, "gitea__get_server_info", json!({})).await;
    assert!(text(&r).contains("bob"), "{r:?}");
    seen_by_agents.push_str(&text(&r));
    let r = call(
        &claude,
        "gitea__create_issue",
        json!({"owner": "alice", "repo": "notes", "title": "from claude", "body": "hello"}),
    )
    .await;
    assert!(!r.is_error, "{r:?}");
    seen_by_agents.push_str(&text(&r));
    // codex may read, not write: refused by the gate, nothing reaches Gitea.
    let before = gitea.requests().len();
    let r = call(
        &codex,
        "gitea__create_issue",
        json!({"owner": "alice", "repo": "notes", "title": "from codex"}),
    )
    .await;
    assert!(r.is_error);
    assert_eq!(r.code.map(|c| c.as_str()), Some("capability_required"));
    assert_eq!(gitea.requests().len(), before);
    seen_by_agents.push_str(&text(&r));
    // A bad request answered by Gitea with an error: clear, and carries no secret.
    let r = call(
        &claude,
        "gitea__get_issue",
        json!({"owner": "alice", "repo": "notes", "number": 9999}),
    )
    .await;
    assert!(r.is_error, "{r:?}");
    seen_by_agents.push_str(&text(&r));
    // gemini's token is rejected: Gitea echoes it, the gateway scrubs it.
    let r = call(&gemini, "gitea__get_server_info", json!({})).await;
    assert!(r.is_error, "{r:?}");
    let g = text(&r);
    assert!(
        !g.contains(REJECTED),
        "the echoed token reached the agent: {g}"
    );
    seen_by_agents.push_str(&g);

    // Every request claude caused carried claude's token, and only those; codex's carried
    // codex's.
    let requests = gitea.requests();
    assert!(!requests.is_empty());
    for req in &requests {
        let auth = req.authorization.clone().unwrap_or_default();
        assert!(
            auth == format!("token {CANARY}")
                || auth == format!("token {CODEX_GITEA}")
                || auth == format!("token {REJECTED}"),
            "unexpected credential: {auth}"
        );
    }
    assert!(requests.iter().any(|r| r.login.as_deref() == Some("alice")));
    assert!(requests.iter().any(|r| r.login.as_deref() == Some("bob")));

    // Resources and prompts lists carry no secret either.
    let raw = reqwest::Client::new();
    for method in ["resources/list", "prompts/list"] {
        let body = raw
            .post(&url)
            .bearer_auth(token("claude"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {}
                }}}),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        seen_by_agents.push_str(&body);
    }
    for secret in [CANARY, REJECTED, CODEX_GITEA] {
        assert!(
            !seen_by_agents.contains(secret),
            "a secret reached an agent"
        );
    }

    // gitea-mcp logs at INFO here (on one line per record: a wide terminal), so its failed call
    // with the rejected token reaches the gateway's log through the child's stderr, with the
    // token replaced. That pipe is read on a task of its own, not on the call's path: the line
    // may come after the answer, so it is waited for.
    eventually_async_ok("the child's stderr logged with its token redacted", || {
        let from_child: Vec<String> = logs
            .text()
            .lines()
            .filter(|l| l.contains(kberg_server::aggregate::STDERR_TARGET))
            .map(str::to_owned)
            .collect();
        async move {
            if from_child.iter().any(|l| l.contains("[redacted]")) {
                Ok(())
            } else {
                Err(format!(
                    "the child's lines so far:\n{}",
                    from_child.join("\n")
                ))
            }
        }
    })
    .await;

    stop.cancel();
    served.await.unwrap().unwrap();
    let logged = logs.text();
    assert!(logged.contains("gitea"), "the log was captured");
    for secret in [CANARY, REJECTED, CODEX_GITEA] {
        assert!(
            !logged.contains(secret),
            "a secret reached the gateway's log: {}",
            logged
                .lines()
                .find(|l| l.contains(secret))
                .unwrap_or_default()
        );
    }
}
