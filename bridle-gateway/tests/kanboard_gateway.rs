//! Kanboard wired into the gateway from `bridle.yaml`: the tools appear as `kanboard__<tool>`
//! beside the gateway's own, each agent's credential comes from the vault per call (its own
//! Kanboard user on every request), the project mapping limits what it sees, and
//! `permissions.<type>.kanboard` decides reads and writes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod support;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::gateway::open_vault;
use bridle_gateway::vault::SecretValue;
use bridle_rules::{AgentCatalog, ReadWrite, RulesStore};
use kberg_core::{CallOptions, Caller, ErrorCode, Principal};
use serde_json::json;
use support::kanboard_standin::KanboardStandIn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kanboard_from_the_configuration_with_vault_credentials() {
    let kb = KanboardStandIn::start().await;
    let claude_user = kb.add_user("claude-bot", "claude-kb-token");
    let codex_user = kb.add_user("codex-bot", "codex-kb-token");
    let shop = kb.add_project("Shop", &[1, claude_user, codex_user]);
    let hidden = kb.add_project("Hidden", &[1, claude_user, codex_user]);

    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(&format!(
        "kanboard:\n  url: '{}'\n  agents:\n    claude: {{secret: kanboard-claude, user: claude-bot}}\n    codex: {{secret: kanboard-codex, user: codex-bot}}\n  projects:\n    demo: [{shop}]\n",
        kb.endpoint
    ));
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    let mut doc = demo_document();
    doc.permissions.get_mut("claude").unwrap().kanboard = ReadWrite {
        read: true,
        write: true,
    };
    doc.permissions.get_mut("codex").unwrap().kanboard = ReadWrite {
        read: true,
        write: false,
    };
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &doc, "test")
        .unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let (vault, _) = open_vault(tmp.path(), &config).unwrap();
    vault
        .create(
            "kanboard-claude",
            &SecretValue::from("claude-kb-token"),
            "user:test",
        )
        .unwrap();
    vault
        .create(
            "kanboard-codex",
            &SecretValue::from("codex-kb-token"),
            "user:test",
        )
        .unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    let tools = gateway.app().tools().clone();
    let caller = |name: &str| {
        Caller::new(
            Principal::new(name)
                .with_agent(name)
                .with_grants(gateway.context().grants_for(name)),
        )
    };
    let (claude, codex) = (caller("claude"), caller("codex"));
    let listed: Vec<String> = tools.list(&claude).into_iter().map(|s| s.name).collect();
    assert!(
        listed.contains(&"list_projects".to_string()),
        "the gateway's own"
    );
    assert!(
        listed.contains(&"kanboard__list_projects".to_string()),
        "{listed:?}"
    );

    let call = |c: &Caller, name: &str, args: serde_json::Value| {
        let (tools, c, name) = (tools.clone(), c.clone(), name.to_string());
        async move { tools.call(&c, &name, args, CallOptions::default()).await }
    };
    let out = call(&claude, "kanboard__whoami", json!({})).await.unwrap();
    assert!(!out.is_error, "{out:?}");
    assert!(out.all_text().contains("claude-bot"), "{}", out.all_text());
    let out = call(&codex, "kanboard__whoami", json!({})).await.unwrap();
    assert!(out.all_text().contains("codex-bot"), "{}", out.all_text());

    // The mapping: only the Shop project is visible.
    let out = call(&claude, "kanboard__list_projects", json!({}))
        .await
        .unwrap();
    let text = out.all_text();
    assert!(text.contains("Shop") && !text.contains("Hidden"), "{text}");
    let out = call(
        &claude,
        "kanboard__get_project",
        json!({"project_id": hidden}),
    )
    .await
    .unwrap();
    assert!(out.is_error, "{out:?}");

    // claude writes; codex may not.
    let out = call(
        &claude,
        "kanboard__create_task",
        json!({"project_id": shop, "title": "from claude", "reference": "r-1"}),
    )
    .await
    .unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(kb.task_count(shop), 1);
    let err = call(
        &codex,
        "kanboard__create_task",
        json!({"project_id": shop, "title": "from codex"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityRequired);
    assert_eq!(kb.task_count(shop), 1);

    // Every request ran as the calling agent's own Kanboard user, and every use is in the
    // vault's log.
    let users: Vec<String> = kb.log().into_iter().map(|(who, _)| who).collect();
    assert!(
        users.iter().all(|u| u == "claude-bot" || u == "codex-bot"),
        "{users:?}"
    );
    let uses = vault
        .audit_log(0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "use")
        .count();
    assert!(uses >= 4, "{uses}");

    // A revoked credential: refused, nothing sent.
    vault.revoke("kanboard-codex", 1, "user:test").unwrap();
    let before = kb.log().len();
    let out = call(&codex, "kanboard__whoami", json!({})).await.unwrap();
    assert!(out.is_error);
    assert_eq!(kb.log().len(), before);
}

/// The result's stable code (`None` for a success).
fn refusal_code(out: &kberg_core::ToolOutput) -> Option<String> {
    out.is_error.then(|| {
        out.structured
            .as_ref()
            .and_then(|s| s["code"].as_str())
            .unwrap_or_default()
            .to_string()
    })
}

/// `kanboard.write` is checked per Bridle project: an agent whose type may write in project
/// `alpha` (so it holds the capability) but only read in project `beta` changes nothing in
/// beta's Kanboard project, by any write tool, while the same writes in alpha's go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kanboard_writes_need_the_write_permission_of_the_project_they_touch() {
    use bridle_gateway::kanboard::{Credential, KanboardClient};

    let kb = KanboardStandIn::start().await;
    let claude_user = kb.add_user("claude-bot", "claude-kb-token");
    let board_a = kb.add_project("Alpha board", &[1, claude_user]);
    let board_b = kb.add_project("Beta board", &[1, claude_user]);

    // A task (with a subtask) already on beta's board, put there by a person.
    let admin = KanboardClient::new(
        kb.endpoint.parse().unwrap(),
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    let app = Credential::AppToken {
        token: support::kanboard_standin::APP_TOKEN.into(),
        acting_user_id: None,
    };
    let b_task = admin
        .call(
            &app,
            "createTask",
            json!({"project_id": board_b, "title": "beta's"}),
        )
        .await
        .unwrap()
        .as_i64()
        .unwrap();
    let b_subtask = admin
        .call(
            &app,
            "createSubtask",
            json!({"task_id": b_task, "title": "step"}),
        )
        .await
        .unwrap()
        .as_i64()
        .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(&format!(
        "kanboard:\n  url: '{}'\n  agents:\n    claude: {{secret: kanboard-claude, user: claude-bot}}\n  projects:\n    alpha: [{board_a}]\n    beta: [{board_b}]\n",
        kb.endpoint
    ));
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    for (project, write) in [("alpha", true), ("beta", false)] {
        let mut doc = demo_document();
        doc.permissions.get_mut("claude").unwrap().kanboard = ReadWrite { read: true, write };
        store.create(project, &doc, "test").unwrap();
    }
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let (vault, _) = open_vault(tmp.path(), &config).unwrap();
    vault
        .create(
            "kanboard-claude",
            &SecretValue::from("claude-kb-token"),
            "user:test",
        )
        .unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    let tools = gateway.app().tools().clone();
    let claude = Caller::new(
        Principal::new("claude")
            .with_agent("claude")
            .with_grants(gateway.context().grants_for("claude")),
    );
    let call = |name: &str, args: serde_json::Value| {
        let (tools, c, name) = (tools.clone(), claude.clone(), name.to_string());
        async move {
            tools
                .call(&c, &name, args, CallOptions::default())
                .await
                .unwrap()
        }
    };

    // Beta's board may be read...
    let out = call("kanboard__get_task", json!({"task_id": b_task})).await;
    assert!(!out.is_error, "{}", out.all_text());

    // ...but no write tool changes it: each is refused with the stable code, and Kanboard
    // is only read (no procedure that changes anything reaches it).
    let sent_before = kb.log().len();
    let writes = [
        (
            "create_task",
            json!({"project_id": board_b, "title": "not allowed"}),
        ),
        (
            "update_task",
            json!({"task_id": b_task, "title": "renamed"}),
        ),
        ("move_task", json!({"task_id": b_task, "column": "Done"})),
        ("close_task", json!({"task_id": b_task})),
        ("reopen_task", json!({"task_id": b_task})),
        (
            "assign_task",
            json!({"task_id": b_task, "user": "claude-bot"}),
        ),
        ("set_tags", json!({"task_id": b_task, "tags": ["x"]})),
        (
            "add_comment",
            json!({"task_id": b_task, "content": "hello"}),
        ),
        (
            "create_subtask",
            json!({"task_id": b_task, "title": "more"}),
        ),
        (
            "update_subtask",
            json!({"task_id": b_task, "subtask_id": b_subtask, "status": "done"}),
        ),
    ];
    for (tool, args) in &writes {
        let out = call(&format!("kanboard__{tool}"), args.clone()).await;
        assert_eq!(
            refusal_code(&out).as_deref(),
            Some("capability_required"),
            "{tool}: {}",
            out.all_text()
        );
        assert!(
            out.all_text().contains("kanboard.write"),
            "{}",
            out.all_text()
        );
    }
    let sent: Vec<String> = kb.log()[sent_before..]
        .iter()
        .map(|(_, method)| method.clone())
        .collect();
    assert!(sent.iter().all(|m| m.starts_with("get")), "{sent:?}");
    assert_eq!(kb.task_count(board_b), 1);

    // The same writes on alpha's board go through.
    let out = call(
        "kanboard__create_task",
        json!({"project_id": board_a, "title": "allowed"}),
    )
    .await;
    assert_eq!(refusal_code(&out), None, "{}", out.all_text());
    assert_eq!(kb.task_count(board_a), 1);
    let a_task = out.structured.as_ref().unwrap()["task_id"]
        .as_i64()
        .unwrap();
    for (tool, args) in [
        ("move_task", json!({"task_id": a_task, "column": "Done"})),
        (
            "add_comment",
            json!({"task_id": a_task, "content": "hello"}),
        ),
        ("close_task", json!({"task_id": a_task})),
    ] {
        let out = call(&format!("kanboard__{tool}"), args).await;
        assert_eq!(refusal_code(&out), None, "{tool}: {}", out.all_text());
    }
}
