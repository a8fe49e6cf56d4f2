//! Preview / commit through the gate: the first call is a dry run with a commit token; the
//! token commits exactly the previewed call once; replayed, tampered, expired and borrowed
//! tokens are refused with stable codes and nothing runs twice.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Delete {
    /// Note ids to delete.
    ids: Vec<String>,
    /// Also empty the trash.
    #[serde(default)]
    purge: bool,
}

type Log = Arc<Mutex<Vec<(CallPhase, Vec<String>)>>>;

struct App {
    tools: ToolRegistry,
    log: Log,
}

fn app() -> App {
    app_with(ToolRegistry::builder())
}

fn app_with(builder: ToolRegistryBuilder) -> App {
    let tools = builder.build();
    let cap = WriteCapability::new("notes.delete", "Delete notes");
    tools.declare(cap.clone()).unwrap();
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    tools
        .register(
            ToolBuilder::new("delete_notes")
                .description("Delete notes")
                .write(cap.clone())
                .previews()
                .output_schema(json!({"type": "object", "properties": {"deleted": {"type": "integer"}}, "required": ["deleted"]}))
                .handler(move |a: Delete, ctx| {
                    let l = Arc::clone(&l);
                    async move {
                        l.lock().unwrap().push((ctx.phase(), a.ids.clone()));
                        if a.ids.iter().any(|i| i == "locked") {
                            return Ok(ToolOutput::error_with("note `locked` cannot be deleted", json!({})));
                        }
                        if ctx.is_preview() {
                            Ok(ToolOutput::text(format!(
                                "would delete {} notes{}",
                                a.ids.len(),
                                if a.purge { " and empty the trash" } else { "" }
                            ))
                                .with_structured(json!({"would_delete": a.ids})))
                        } else {
                            ToolOutput::json(&json!({"deleted": a.ids.len()}))
                        }
                    }
                }),
        )
        .unwrap();
    // A second preview tool, to check tokens are bound to their tool.
    tools
        .register(
            ToolBuilder::new("archive_notes")
                .write(cap)
                .previews()
                .handler(|_a: Delete, _ctx| async { Ok(ToolOutput::text("archived")) }),
        )
        .unwrap();
    App { tools, log }
}

fn writer(id: &str) -> Caller {
    Caller::new(Principal::new(id).with_grants(Grants::of(["notes.delete"])))
}

async fn call(app: &App, who: &Caller, tool: &str, args: Value) -> Result<ToolOutput, GateError> {
    app.tools
        .call(who, tool, args, CallOptions::default())
        .await
}

fn token_of(out: &ToolOutput) -> String {
    let s = out.structured.as_ref().unwrap();
    assert_eq!(s["status"], "preview");
    s[COMMIT_TOKEN_FIELD].as_str().unwrap().to_string()
}

fn commits(app: &App) -> usize {
    app.log
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| *p == CallPhase::Commit)
        .count()
}

#[tokio::test]
async fn preview_then_commit_runs_exactly_what_was_previewed() {
    let app = app();
    let ann = writer("ann");
    let out = call(
        &app,
        &ann,
        "delete_notes",
        json!({"ids": ["a", "b"], "purge": true}),
    )
    .await
    .unwrap();
    assert!(!out.is_error);
    assert!(out.all_text().contains("would delete 2 notes"));
    assert!(out.all_text().contains("commit_token"));
    let token = token_of(&out);
    assert_eq!(
        out.structured.as_ref().unwrap()["preview"]["would_delete"],
        json!(["a", "b"])
    );
    assert_eq!(
        app.log.lock().unwrap().as_slice(),
        &[(CallPhase::Preview, vec!["a".to_string(), "b".to_string()])]
    );
    // Same arguments in another key order: the canonical digest matches.
    let out = call(
        &app,
        &ann,
        "delete_notes",
        json!({"purge": true, "commit_token": token, "ids": ["a", "b"]}),
    )
    .await
    .unwrap();
    assert_eq!(out.structured.unwrap()["deleted"], 2);
    assert_eq!(commits(&app), 1);
}

#[tokio::test]
async fn replay_is_refused_and_nothing_runs_twice() {
    let app = app();
    let ann = writer("ann");
    let args = json!({"ids": ["a"]});
    let token = token_of(
        &call(&app, &ann, "delete_notes", args.clone())
            .await
            .unwrap(),
    );
    let mut with_token = args.clone();
    with_token[COMMIT_TOKEN_FIELD] = json!(token);
    call(&app, &ann, "delete_notes", with_token.clone())
        .await
        .unwrap();
    for _ in 0..3 {
        let e = call(&app, &ann, "delete_notes", with_token.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::CommitTokenUsed);
        assert!(!e.code().is_retryable());
    }
    assert_eq!(commits(&app), 1);
}

#[tokio::test]
async fn concurrent_commits_of_one_token_run_once() {
    let app = Arc::new(app());
    let ann = writer("ann");
    let token = token_of(
        &call(&app, &ann, "delete_notes", json!({"ids": ["x"]}))
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let app = Arc::clone(&app);
        let ann = ann.clone();
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            call(
                &app,
                &ann,
                "delete_notes",
                json!({"ids": ["x"], "commit_token": token}),
            )
            .await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e.code(), ErrorCode::CommitTokenUsed),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(commits(&app), 1);
}

#[tokio::test]
async fn altered_arguments_are_refused_without_spending_the_token() {
    let app = app();
    let ann = writer("ann");
    let token = token_of(
        &call(&app, &ann, "delete_notes", json!({"ids": ["a"]}))
            .await
            .unwrap(),
    );
    for altered in [
        json!({"ids": ["a", "b"], "commit_token": token}),
        json!({"ids": ["b"], "commit_token": token}),
        json!({"ids": ["a"], "purge": true, "commit_token": token}),
    ] {
        let e = call(&app, &ann, "delete_notes", altered).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::CommitArgumentsChanged);
    }
    assert_eq!(commits(&app), 0);
    // The previewed arguments still commit.
    call(
        &app,
        &ann,
        "delete_notes",
        json!({"ids": ["a"], "commit_token": token}),
    )
    .await
    .unwrap();
    assert_eq!(commits(&app), 1);
}

#[tokio::test]
async fn tokens_are_bound_to_principal_and_tool() {
    let app = app();
    let ann = writer("ann");
    let args = json!({"ids": ["a"]});
    let token = token_of(
        &call(&app, &ann, "delete_notes", args.clone())
            .await
            .unwrap(),
    );
    let with_token = json!({"ids": ["a"], "commit_token": token});
    // Another principal holding the same grant.
    let e = call(&app, &writer("bob"), "delete_notes", with_token.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CommitTokenInvalid);
    // Another tool.
    let e = call(&app, &ann, "archive_notes", with_token.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CommitTokenInvalid);
    // Forged tokens.
    for forged in ["ct1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "", "x"] {
        let e = call(
            &app,
            &ann,
            "delete_notes",
            json!({"ids": ["a"], "commit_token": forged}),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::CommitTokenInvalid);
    }
    // Not a string: an argument error naming the field.
    let e = call(
        &app,
        &ann,
        "delete_notes",
        json!({"ids": ["a"], "commit_token": 5}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    assert_eq!(e.details()["errors"][0]["pointer"], "/commit_token");
    assert_eq!(commits(&app), 0);
    // Ann's token still works for Ann.
    call(&app, &ann, "delete_notes", with_token).await.unwrap();
    assert_eq!(commits(&app), 1);
}

#[tokio::test]
async fn expired_tokens_are_refused() {
    let app = app_with(
        ToolRegistry::builder().commit_config(CommitConfig::default().with_ttl(Duration::ZERO)),
    );
    let ann = writer("ann");
    let token = token_of(
        &call(&app, &ann, "delete_notes", json!({"ids": ["a"]}))
            .await
            .unwrap(),
    );
    let e = call(
        &app,
        &ann,
        "delete_notes",
        json!({"ids": ["a"], "commit_token": token}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CommitTokenExpired);
    assert!(e.code().is_retryable());
    assert_eq!(commits(&app), 0);
}

#[tokio::test]
async fn the_gate_checks_capability_before_previewing() {
    let app = app();
    let reader = Caller::new(Principal::new("ann"));
    let e = call(&app, &reader, "delete_notes", json!({"ids": ["a"]}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CapabilityRequired);
    let e = call(&app, &writer("ann"), "delete_notes", json!({"ids": 3}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    assert!(app.log.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_error_preview_issues_no_token() {
    let app = app();
    let out = call(
        &app,
        &writer("ann"),
        "delete_notes",
        json!({"ids": ["locked"]}),
    )
    .await
    .unwrap();
    assert!(out.is_error);
    assert!(!out.all_text().contains("commit_token"));
}

#[tokio::test]
async fn listed_schema_offers_the_commit_token() {
    let app = app();
    let spec = app
        .tools
        .list(&writer("ann"))
        .into_iter()
        .find(|s| s.name == "delete_notes")
        .unwrap();
    assert_eq!(
        spec.input_schema["properties"][COMMIT_TOKEN_FIELD]["type"],
        "string"
    );
    let required = spec.input_schema["required"].as_array().unwrap();
    assert!(!required.contains(&json!(COMMIT_TOKEN_FIELD)));
    // The listed output schema admits the preview envelope too.
    assert!(spec.output_schema.unwrap()["anyOf"].is_array());
    // The app's own spec is unchanged.
    let own = app.tools.spec("delete_notes").unwrap();
    assert!(own.previews);
    assert!(
        own.input_schema["properties"]
            .get(COMMIT_TOKEN_FIELD)
            .is_none()
    );
}

#[test]
fn a_preview_tool_may_not_claim_the_token_field() {
    let tools = ToolRegistry::new();
    let cap = WriteCapability::new("w", "w");
    tools.declare(cap.clone()).unwrap();
    let err = tools
        .register(ToolBuilder::new("t").write(cap).previews().raw_handler(
            json!({"type": "object", "properties": {"commit_token": {"type": "string"}}}),
            |_a, _c| async { Ok(ToolOutput::default()) },
        ))
        .unwrap_err();
    assert!(matches!(err, CoreError::InvalidSchema { .. }), "{err}");
}

/// A per-principal bound of zero, set on the public field rather than through the builder
/// (which makes it at least one), is taken as one: issuing a token used to evict for ever,
/// holding the token store's lock, so that preview and every other preview call hung.
#[test]
fn a_zero_token_bound_set_on_the_field_does_not_hang_previews() {
    let (tx, rx) = std::sync::mpsc::channel();
    // Its own thread: a call that never returns must not take the test harness with it.
    std::thread::spawn(move || {
        let mut config = CommitConfig::default();
        config.max_tokens_per_principal = 0;
        config.max_tokens = 0;
        let app = app_with(ToolRegistry::builder().commit_config(config));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let out = runtime.block_on(async {
            let ann = writer("ann");
            let first = call(&app, &ann, "delete_notes", json!({"ids": ["a"]})).await;
            let second = call(&app, &ann, "delete_notes", json!({"ids": ["b"]})).await;
            (first, second)
        });
        let _ = tx.send(out);
    });
    let (first, second) = rx
        .recv_timeout(kberg_testkit::WAIT)
        .expect("the previews never answered");
    let second = token_of(&second.unwrap());
    assert!(first.is_ok());
    assert!(second.starts_with("ct1."));
}
