//! The gateway's own tools, resources and grants through its public API: every tool through
//! Kberg's gate, the watcher following the projects folder, rendering for the client's type.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::resources::{rules_uri, watch};
use bridle_gateway::tools::register_tools;
use bridle_gateway::{GatewayContext, build_app};
use bridle_rules::{ChangeRequest, Origin, capabilities};
use kberg_core::ResourceEvent;
use kberg_core::{Grants, Principal, ToolOutput, ToolRegistry};
use kberg_testkit::eventually_async;
use serde_json::json;

fn setup() -> (tempfile::TempDir, Arc<GatewayContext>) {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let shared = GatewayContext::open(tmp.path(), config).unwrap();
    shared
        .store
        .create("demo", &demo_document(), "test")
        .unwrap();
    (tmp, shared)
}

async fn next_event(sub: &mut kberg_core::Subscriber) -> ResourceEvent {
    tokio::time::timeout(Duration::from_secs(30), sub.next())
        .await
        .expect("an event arrives")
        .expect("the registry is alive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_follows_the_projects_folder() {
    let (tmp, shared) = setup();
    let app = build_app(&shared).unwrap();
    let resources = app.resources().clone();
    let uri = rules_uri("demo", "claude");
    assert!(resources.exists(&uri));
    assert!(resources.exists(&rules_uri("demo", "codex")));
    let mut sub = resources.subscriber();
    sub.subscribe(&uri).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(watch(
        Arc::clone(&shared),
        resources.clone(),
        tmp.path().join("projects"),
        Duration::from_millis(20),
        stop.clone(),
    ));
    // The watcher has taken its first snapshot once it has noticed a change made after it
    // started (a change made before that snapshot is part of it, and would not be told): a
    // project added and then touched until its resources appear.
    let mut first = demo_document();
    first.project.name = "Started".into();
    shared.store.create("started", &first, "test").unwrap();
    let started = rules_uri("started", "claude");
    let started_file = tmp.path().join("projects/started.yaml");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut touches = 0;
    while !resources.exists(&started) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watcher never noticed a new project"
        );
        touches += 1;
        let mut text = std::fs::read_to_string(&started_file).unwrap();
        text.push_str(&format!("# touched {touches}\n"));
        std::fs::write(&started_file, text).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // An approval (from any process) changes the file: subscribers are told.
    let p = shared
        .store
        .propose(
            "demo",
            &Origin::agent("claude", None),
            &ChangeRequest::Pattern {
                standard: Some("hexagonal".into()),
                custom: None,
            },
            None,
        )
        .unwrap();
    shared.store.approve(p.id, "alice").unwrap();
    assert_eq!(
        next_event(&mut sub).await,
        ResourceEvent::Updated { uri: uri.clone() }
    );
    let text = resources.read(&uri).await.unwrap();
    assert!(matches!(&text[0].body, kberg_core::ResourceBody::Text(t) if t.contains("hexagonal")));

    // A new project file gets resources.
    let mut doc = demo_document();
    doc.project.name = "Second".into();
    shared.store.create("second", &doc, "test").unwrap();
    let second = rules_uri("second", "claude");
    eventually_async("a resource for the new project", || {
        let found = resources.exists(&second).then_some(());
        async move { found }
    })
    .await;

    // A removed project: its subscribers learn it is gone.
    std::fs::remove_file(tmp.path().join("projects/demo.yaml")).unwrap();
    // (An approval may be seen twice, by its file and by its change-log row; an extra
    // "read it again" is harmless.)
    loop {
        match next_event(&mut sub).await {
            ResourceEvent::Updated { uri: u } if u == uri => continue,
            other => {
                assert_eq!(other, ResourceEvent::Removed { uri: uri.clone() });
                break;
            }
        }
    }
    assert!(!resources.exists(&uri));

    stop.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn rules_render_for_the_client_only_when_the_type_was_guessed() {
    use kberg_core::{CallOptions, ClientInfo};
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut config = GatewayConfig::load(tmp.path()).unwrap();
    // `claude` has no `type`: it is guessed from the name; `codex` keeps its written type.
    config.agents.get_mut("claude").unwrap().agent_type = String::new();
    let shared = GatewayContext::open(tmp.path(), config).unwrap();
    shared
        .store
        .create("demo", &demo_document(), "test")
        .unwrap();
    assert!(shared.agent("claude").unwrap().type_guessed);
    let tools = ToolRegistry::new();
    register_tools(&tools, &shared).unwrap();
    let rendered_for = |who: &str, client: Option<ClientInfo>| {
        let (tools, c) = (tools.clone(), caller(&shared, who));
        async move {
            let opts = match client {
                Some(client) => CallOptions::default().with_client(client),
                None => CallOptions::default(),
            };
            let out = tools
                .call(&c, "get_rules", json!({"project": "demo"}), opts)
                .await
                .unwrap();
            assert!(!out.is_error, "{out:?}");
            out.structured.unwrap()["agent"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    // The client's self-report picks the format when the type was only guessed ...
    assert_eq!(
        rendered_for("claude", Some(ClientInfo::new("codex-cli", "0.9"))).await,
        "codex"
    );
    // ... falls back to the guess when the catalog does not know the client ...
    assert_eq!(
        rendered_for("claude", Some(ClientInfo::new("mcp", "1"))).await,
        "claude"
    );
    assert_eq!(rendered_for("claude", None).await, "claude");
    // ... and never overrides a written type.
    assert_eq!(
        rendered_for("codex", Some(ClientInfo::new("claude-code", "2"))).await,
        "codex"
    );
    // Permissions stay with the guessed type whatever the client says.
    assert_eq!(
        caller(&shared, "claude").principal().agent.as_deref(),
        Some("claude")
    );
}

#[tokio::test]
async fn grants_follow_the_live_documents() {
    let (_tmp, shared) = setup();
    let g = shared.grants_for("claude");
    assert!(g.contains(capabilities::RULES_PROPOSE));
    assert!(g.contains(capabilities::SCOPE_REQUEST));
    assert!(!g.contains(capabilities::SECRETS_READ));
    assert!(shared.grants_for("stranger").is_empty());

    let loaded = shared.store.load("demo").unwrap();
    let rev = loaded.document.revision;
    let mut doc = loaded.document;
    doc.permissions.get_mut("claude").unwrap().rules.propose = false;
    shared
        .store
        .save_edit("demo", &doc, rev, "alice", "no proposals")
        .unwrap();
    assert!(
        !shared
            .grants_for("claude")
            .contains(capabilities::RULES_PROPOSE)
    );
}

fn caller(shared: &GatewayContext, name: &str) -> kberg_core::Caller {
    let agent = shared
        .agent(name)
        .map(|a| a.agent_type.clone())
        .unwrap_or_default();
    kberg_core::Caller::new(
        Principal::new(name)
            .with_agent(agent)
            .with_grants(shared.grants_for(name)),
    )
}

fn code(out: &ToolOutput) -> String {
    out.structured
        .as_ref()
        .and_then(|s| s["code"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_through_the_gate() {
    use kberg_core::{CallOptions, ErrorCode};
    let (_tmp, shared) = setup();
    let tools = ToolRegistry::new();
    register_tools(&tools, &shared).unwrap();
    let claude = caller(&shared, "claude");
    let call = |c: &kberg_core::Caller, name: &str, args: serde_json::Value| {
        let (tools, c, name) = (tools.clone(), c.clone(), name.to_string());
        async move { tools.call(&c, &name, args, CallOptions::default()).await }
    };

    let out = call(&claude, "list_projects", json!({})).await.unwrap();
    assert_eq!(out.structured.unwrap()["projects"][0]["project"], "demo");

    // A custom pattern with an example repository, queued then approved.
    let out = call(
        &claude,
        "add_pattern",
        json!({"project": "demo", "name": "modified-mvc", "description": "MVC without DB access in controllers",
               "example_repos": [{"url": "https://git.example.invalid/x", "reference_tag": "ex-1"}]}),
    )
    .await
    .unwrap();
    assert!(!out.is_error, "{}", out.all_text());
    let id = out.structured.unwrap()["proposal"].as_u64().unwrap();
    shared.store.approve(id, "alice").unwrap();
    let doc = shared.store.load("demo").unwrap().document;
    assert_eq!(
        doc.patterns.custom[0].example_repos[0].arch_tag,
        "modified-mvc"
    );

    // update_rules against the current revision is queued; against an old one refused.
    let rev = doc.revision;
    let out = call(
        &claude,
        "update_rules",
        json!({"project": "demo", "base_revision": rev, "stack": ["Rust"]}),
    )
    .await
    .unwrap();
    assert!(!out.is_error, "{}", out.all_text());
    let out = call(
        &claude,
        "update_rules",
        json!({"project": "demo", "base_revision": rev - 1, "stack": ["Go"]}),
    )
    .await
    .unwrap();
    assert_eq!(code(&out), "revision_conflict");

    // Bad arguments are caught by the gate, per field.
    let err = call(
        &claude,
        "propose_guardrail",
        json!({"project": "demo", "id": "x", "statement": "s", "severity": "sometimes"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArguments);
    // A bad id is a clear refusal from the store.
    let out = call(
        &claude,
        "propose_guardrail",
        json!({"project": "demo", "id": "Bad Id", "statement": "s", "severity": "guidance"}),
    )
    .await
    .unwrap();
    assert_eq!(code(&out), "invalid_name");
    let out = call(&claude, "get_rules", json!({"project": "missing"}))
        .await
        .unwrap();
    assert_eq!(code(&out), "unknown_project");

    // Scope tickets: opened by the agent, decided by a person, visible to the agent.
    let out = call(
        &claude,
        "request_scope_approval",
        json!({"project": "demo", "action": "touch CI", "reason": "broken"}),
    )
    .await
    .unwrap();
    let ticket = out.structured.unwrap()["ticket"].as_u64().unwrap();
    shared
        .store
        .decide_scope(ticket, false, "alice", Some("not now"))
        .unwrap();
    let out = call(&claude, "scope_status", json!({"ticket": ticket}))
        .await
        .unwrap();
    assert_eq!(
        out.all_text(),
        format!("Scope ticket #{ticket} is denied: not now.")
    );

    // Approving is refused by name, whatever the grants.
    let err = call(&claude, "approve_proposal", json!({"id": id}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Refused);

    // Without the permission, the gate refuses before the tool runs.
    let loaded = shared.store.load("demo").unwrap();
    let mut doc = loaded.document;
    let rev = doc.revision;
    doc.permissions.get_mut("codex").unwrap().rules.propose = false;
    shared
        .store
        .save_edit("demo", &doc, rev, "alice", "codex read-only")
        .unwrap();
    let codex = caller(&shared, "codex");
    let err = call(
        &codex,
        "propose_guardrail",
        json!({"project": "demo", "id": "y", "statement": "s", "severity": "guidance"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityRequired);
    // A stale principal (grants computed before the change) is still stopped by the tool.
    let stale = kberg_core::Caller::new(
        Principal::new("codex").with_grants(Grants::of([capabilities::RULES_PROPOSE])),
    );
    let out = call(
        &stale,
        "propose_guardrail",
        json!({"project": "demo", "id": "y", "statement": "s", "severity": "guidance"}),
    )
    .await
    .unwrap();
    assert_eq!(code(&out), "capability_required");
    // An unconfigured principal is told so.
    let nobody = kberg_core::Caller::new(
        Principal::new("nobody").with_grants(Grants::of([capabilities::RULES_PROPOSE])),
    );
    let out = call(&nobody, "get_rules", json!({"project": "demo"}))
        .await
        .unwrap();
    assert_eq!(code(&out), "unknown_agent");
}
