//! Human-confirm gating through the gate and the ticket desk: a policy holds big writes as
//! tickets; approval runs the call once, exactly as asked; denial, expiry, double approval,
//! approval by the wrong principal and fetching someone else's result are refused with stable
//! codes. Tickets in SQLite survive a restart (feature `sqlite`). Where the client supports
//! elicitation the human is asked through it instead.
//!
//! The elicitation tests use an in-process `ClientPeer` that answers `elicitation/create` with
//! the MCP 2025-11-25 `ElicitResult` shape (`{"action": "accept" | "decline" | "cancel",
//! "content": {...}}`), or with `PeerError::InputRequired` as the stateless 2026-07-28 path does.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Bulk {
    /// Ids of notes to delete.
    ids: Vec<u32>,
}

/// (principal, ids, phase, ticket) of every run.
type Runs = Arc<Mutex<Vec<(String, Vec<u32>, CallPhase, Option<String>)>>>;

struct App {
    tools: ToolRegistry,
    runs: Runs,
}

/// Holds calls that delete more than 50 notes for a person.
fn bulk_policy(spec: &ToolSpec, args: &Value, _c: &Caller) -> Option<ConfirmRequest> {
    let n = args["ids"].as_array().map_or(0, Vec::len);
    (spec.name.starts_with("bulk_delete") && n > 50)
        .then(|| ConfirmRequest::new(format!("deletes {n} notes, more than 50")))
}

fn app_with_store(store: Option<Arc<dyn TicketStore>>) -> App {
    let mut builder = ToolRegistry::builder().confirm_policy(bulk_policy);
    if let Some(s) = store {
        builder = builder.ticket_store(s);
    }
    app_with(builder)
}

/// The app's tools in a registry built by `builder` (which sets the confirm policy).
fn app_with(builder: ToolRegistryBuilder) -> App {
    let tools = builder.build();
    let cap = WriteCapability::new("notes.delete", "Delete notes");
    tools.declare(cap.clone()).unwrap();
    let runs: Runs = Arc::default();
    for (name, previews) in [("bulk_delete", false), ("bulk_delete_previewed", true)] {
        let r = Arc::clone(&runs);
        let mut b = ToolBuilder::new(name)
            .description("Delete many notes")
            .write(cap.clone());
        if previews {
            b = b.previews();
        }
        tools
            .register(b.handler(move |a: Bulk, ctx| {
                let r = Arc::clone(&r);
                async move {
                    r.lock().unwrap().push((
                        ctx.caller().principal().id.clone(),
                        a.ids.clone(),
                        ctx.phase(),
                        ctx.ticket().map(str::to_string),
                    ));
                    Ok(ToolOutput::text(format!("deleted {}", a.ids.len())))
                }
            }))
            .unwrap();
    }
    App { tools, runs }
}

fn app() -> App {
    app_with_store(None)
}

fn agent() -> Caller {
    Caller::new(
        Principal::new("agent-1")
            .with_agent("claude")
            .with_grants(Grants::of(["notes.delete"])),
    )
}

fn admin() -> Principal {
    Principal::new("alice").with_grants(Grants::of(["kberg.confirm"]))
}

fn many(n: u32) -> Value {
    json!({"ids": (0..n).collect::<Vec<u32>>()})
}

async fn ask(app: &App, tool: &str, args: Value) -> String {
    let e = app
        .tools
        .call(&agent(), tool, args, CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::PendingHumanConfirm, "{e}");
    assert!(!e.code().is_retryable());
    let d = e.details();
    assert!(d["reason"].as_str().unwrap().contains("more than 50"));
    d["ticket"].as_str().unwrap().to_string()
}

/// Both decisions on `id` are refused with `code`.
async fn assert_cannot_decide(desk: &TicketDesk, id: &str, code: ErrorCode) {
    assert_eq!(desk.approve(id, &admin()).await.unwrap_err().code(), code);
    assert_eq!(desk.deny(id, &admin(), None).unwrap_err().code(), code);
}

#[tokio::test]
async fn small_calls_run_and_big_ones_wait() {
    let app = app();
    let out = app
        .tools
        .call(&agent(), "bulk_delete", many(10), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(out.all_text(), "deleted 10");
    let id = ask(&app, "bulk_delete", many(120)).await;
    assert_eq!(
        app.runs.lock().unwrap().len(),
        1,
        "the big call did not run"
    );
    let pending = app.tools.tickets().pending().unwrap();
    assert_eq!(pending.len(), 1);
    let t = &pending[0];
    assert_eq!(t.id, id);
    assert_eq!(t.tool, "bulk_delete");
    assert_eq!(t.arguments, many(120));
    assert_eq!(t.principal.id, "agent-1");
    assert_eq!(t.status, TicketStatus::Pending);
    // The asker is told to wait.
    let e = app.tools.tickets().result(&id, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::TicketPending);
}

#[tokio::test]
async fn approval_runs_the_call_once_exactly_as_asked() {
    let app = app();
    let id = ask(&app, "bulk_delete", many(60)).await;
    let desk = app.tools.tickets();
    let outcome = desk.approve(&id, &admin()).await.unwrap();
    let TicketOutcome::Output(out) = outcome else {
        panic!("expected output, got {outcome:?}")
    };
    assert_eq!(out.all_text(), "deleted 60");
    {
        let runs = app.runs.lock().unwrap();
        assert_eq!(runs.len(), 1);
        let (who, ids, phase, ticket) = &runs[0];
        assert_eq!(who, "agent-1");
        assert_eq!(ids, &(0..60).collect::<Vec<u32>>());
        assert_eq!(*phase, CallPhase::Direct);
        assert_eq!(ticket.as_deref(), Some(id.as_str()));
    }
    // The asker fetches the result; anyone else is told the ticket does not exist.
    let out = desk.result(&id, &agent()).unwrap();
    assert_eq!(out.all_text(), "deleted 60");
    let stranger = Caller::new(Principal::new("mallory"));
    assert_eq!(
        desk.result(&id, &stranger).unwrap_err().code(),
        ErrorCode::TicketUnknown
    );
    // Approving (or denying) again is refused and nothing runs twice.
    let e = desk.approve(&id, &admin()).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::TicketAlreadyDecided);
    assert_eq!(e.details()["status"], "done");
    let e = desk.deny(&id, &admin(), None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::TicketAlreadyDecided);
    assert_eq!(app.runs.lock().unwrap().len(), 1);
    let t = desk.get(&id).unwrap();
    assert_eq!(t.status, TicketStatus::Done);
    assert_eq!(t.decided_by.as_deref(), Some("alice"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_approvals_run_once() {
    let app = app();
    let id = ask(&app, "bulk_delete", many(99)).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let desk = app.tools.tickets();
        let id = id.clone();
        tasks.push(tokio::spawn(
            async move { desk.approve(&id, &admin()).await },
        ));
    }
    let mut oks = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => oks += 1,
            Err(e) => assert_eq!(e.code(), ErrorCode::TicketAlreadyDecided),
        }
    }
    assert_eq!(oks, 1);
    assert_eq!(app.runs.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn only_principals_with_the_right_may_decide() {
    let app = app();
    let id = ask(&app, "bulk_delete", many(51)).await;
    let desk = app.tools.tickets();
    // No approver grant.
    let nobody = Principal::new("bob").with_grants(Grants::of(["notes.delete"]));
    assert_eq!(
        desk.approve(&id, &nobody).await.unwrap_err().code(),
        ErrorCode::TicketForbidden
    );
    assert_eq!(
        desk.deny(&id, &nobody, None).unwrap_err().code(),
        ErrorCode::TicketForbidden
    );
    // The asker itself, even holding the approver grant.
    let selfish = Principal::new("agent-1").with_grants(Grants::of(["kberg.confirm"]));
    assert_eq!(
        desk.approve(&id, &selfish).await.unwrap_err().code(),
        ErrorCode::TicketForbidden
    );
    assert!(app.runs.lock().unwrap().is_empty());
    assert_eq!(desk.get(&id).unwrap().status, TicketStatus::Pending);
    // Unless the app allows self-approval.
    let lenient = app_with(
        ToolRegistry::builder()
            .confirm_policy(bulk_policy)
            .confirm_config(ConfirmConfig::default().allow_self_approval(true)),
    );
    let own = ask(&lenient, "bulk_delete", many(51)).await;
    lenient
        .tools
        .tickets()
        .approve(&own, &selfish)
        .await
        .unwrap();
    assert_eq!(lenient.runs.lock().unwrap().len(), 1);
    // Unknown tickets.
    assert_eq!(
        desk.approve("tk_nope", &admin()).await.unwrap_err().code(),
        ErrorCode::TicketUnknown
    );
    assert_eq!(
        desk.get("tk_nope").unwrap_err().code(),
        ErrorCode::TicketUnknown
    );
    // An id of megabytes is quoted cut, wherever it is refused.
    let huge = "tk_".to_string() + &"x".repeat(1_000_000);
    for e in [
        desk.approve(&huge, &admin()).await.unwrap_err(),
        desk.deny(&huge, &admin(), None).unwrap_err(),
        desk.get(&huge).unwrap_err(),
        desk.result(&huge, &agent()).unwrap_err(),
    ] {
        assert_eq!(e.code(), ErrorCode::TicketUnknown);
        let answer = serde_json::to_string(&e.details()).unwrap();
        assert!(answer.len() < 1_000, "{} bytes", answer.len());
        assert!(answer.contains("tk_xxx"), "{answer}");
    }
}

#[tokio::test]
async fn denial_is_final() {
    let app = app();
    let id = ask(&app, "bulk_delete", many(70)).await;
    let desk = app.tools.tickets();
    desk.deny(&id, &admin(), Some("too many")).unwrap();
    let e = desk.result(&id, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::TicketDenied);
    assert_eq!(e.details()["note"], "too many");
    assert!(e.to_output().is_error);
    assert_cannot_decide(&desk, &id, ErrorCode::TicketAlreadyDecided).await;
    assert!(app.runs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn expired_tickets_cannot_be_approved() {
    let app = app_with(
        ToolRegistry::builder()
            .confirm_policy(bulk_policy)
            .confirm_config(ConfirmConfig::default().with_ttl(Duration::ZERO)),
    );
    let id = ask(&app, "bulk_delete", many(80)).await;
    let desk = app.tools.tickets();
    assert_eq!(desk.get(&id).unwrap().status, TicketStatus::Expired);
    assert!(desk.pending().unwrap().is_empty());
    assert_eq!(
        desk.result(&id, &agent()).unwrap_err().code(),
        ErrorCode::TicketExpired
    );
    assert_cannot_decide(&desk, &id, ErrorCode::TicketExpired).await;
    assert!(app.runs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_call_refused_on_approval_records_the_refusal() {
    let app = app();
    let id = ask(&app, "bulk_delete", many(55)).await;
    // The tool is gone by the time the human approves.
    assert!(app.tools.remove("bulk_delete"));
    let outcome = app.tools.tickets().approve(&id, &admin()).await.unwrap();
    assert!(matches!(
        outcome,
        TicketOutcome::Error {
            code: ErrorCode::UnknownTool,
            ..
        }
    ));
    let e = app.tools.tickets().result(&id, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);
    assert_eq!(e.details()["ticket"], id.as_str());
    assert_eq!(
        app.tools.tickets().get(&id).unwrap().status,
        TicketStatus::Failed
    );
}

#[tokio::test]
async fn a_previewed_commit_waits_and_runs_as_a_commit() {
    let app = app();
    let args = many(75);
    let preview = app
        .tools
        .call(
            &agent(),
            "bulk_delete_previewed",
            args.clone(),
            CallOptions::default(),
        )
        .await
        .unwrap();
    let token = preview.structured.unwrap()[COMMIT_TOKEN_FIELD]
        .as_str()
        .unwrap()
        .to_string();
    let mut commit = args.clone();
    commit[COMMIT_TOKEN_FIELD] = json!(token);
    let id = ask(&app, "bulk_delete_previewed", commit.clone()).await;
    // The token was spent on filing the ticket: a replay cannot sneak past the human.
    let e = app
        .tools
        .call(
            &agent(),
            "bulk_delete_previewed",
            commit,
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CommitTokenUsed);
    let t = app.tools.tickets().get(&id).unwrap();
    assert_eq!(t.phase, CallPhase::Commit);
    assert!(t.arguments.get(COMMIT_TOKEN_FIELD).is_none());
    app.tools.tickets().approve(&id, &admin()).await.unwrap();
    let runs = app.runs.lock().unwrap();
    assert_eq!(
        runs.iter().map(|r| r.2).collect::<Vec<_>>(),
        [CallPhase::Preview, CallPhase::Commit]
    );
}

/// Answers `elicitation/create` with a fixed result or error.
struct Peer {
    elicitation: bool,
    answer: Result<Value, PeerError>,
    asked: Mutex<Vec<Value>>,
}

#[async_trait]
impl ClientPeer for Peer {
    async fn notify(&self, _method: &str, _params: Value) -> Result<(), PeerError> {
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        params: Value,
        _cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        assert_eq!(method, "elicitation/create");
        self.asked.lock().unwrap().push(params);
        self.answer.clone()
    }
    fn supports(&self, capability: &str) -> bool {
        capability == "elicitation" && self.elicitation
    }
}

fn asking_app() -> App {
    app_with(
        ToolRegistry::builder().confirm_policy(|_s: &ToolSpec, args: &Value, _c: &Caller| {
            let n = args["ids"].as_array().map_or(0, Vec::len);
            (n > 50).then(|| ConfirmRequest::new("more than 50").or_ask_client())
        }),
    )
}

async fn call_with_peer(app: &App, peer: Arc<Peer>) -> Result<ToolOutput, GateError> {
    let opts = CallOptions::default().with_peer(peer);
    app.tools
        .call(&agent(), "bulk_delete", many(60), opts)
        .await
}

#[tokio::test]
async fn the_client_can_be_asked_instead() {
    let app = asking_app();
    let yes = Arc::new(Peer {
        elicitation: true,
        answer: Ok(json!({"action": "accept", "content": {"approve": true}})),
        asked: Mutex::default(),
    });
    let out = call_with_peer(&app, Arc::clone(&yes)).await.unwrap();
    assert_eq!(out.all_text(), "deleted 60");
    let asked = yes.asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    let msg = asked[0]["message"].as_str().unwrap();
    assert!(msg.contains("claude") && msg.contains("bulk_delete") && msg.contains("more than 50"));
    assert_eq!(asked[0]["requestedSchema"]["required"], json!(["approve"]));
    assert!(app.tools.tickets().list().unwrap().is_empty());
    assert_eq!(app.runs.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_question_shows_an_outside_name_on_one_line_and_cut() {
    // The agent's name may come from outside (a token's subject): a person reading the
    // question must not see a line it adds, a terminal sequence, a reordering or megabytes.
    let app = asking_app();
    let peer = Arc::new(Peer {
        elicitation: true,
        answer: Ok(json!({"action": "decline"})),
        asked: Mutex::default(),
    });
    let hostile = format!(
        "bot\n\nThe admin approved this already.\r\u{1b}[2K\u{202e}\t{}",
        "x".repeat(100_000)
    );
    let caller = Caller::new(
        Principal::new("agent-1")
            .with_agent(hostile)
            .with_grants(Grants::of(["notes.delete"])),
    );
    let opts = CallOptions::default().with_peer(Arc::clone(&peer) as Arc<dyn ClientPeer>);
    let e = app
        .tools
        .call(&caller, "bulk_delete", many(60), opts)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ConfirmDeclined);
    let asked = peer.asked.lock().unwrap();
    let msg = asked[0]["message"].as_str().unwrap();
    let who = msg.split(" wants to run ").next().unwrap();
    assert_eq!(
        who,
        "bot\\n\\nThe admin approved this already.\\r\\u{1b}[2K\\u{202e}\\txxxx…"
    );
    assert!(
        !msg.contains(['\n', '\r', '\u{1b}', '\u{202e}', '\t']),
        "{msg:?}"
    );
    assert!(msg.contains("`bulk_delete` (more than 50)"), "{msg}");
}

#[tokio::test]
async fn a_declining_client_stops_the_call() {
    let app = asking_app();
    for answer in [
        json!({"action": "decline"}),
        json!({"action": "cancel"}),
        json!({"action": "accept", "content": {"approve": false}}),
        json!({"action": "accept", "content": {}}),
        json!("garbage"),
    ] {
        let peer = Arc::new(Peer {
            elicitation: true,
            answer: Ok(answer),
            asked: Mutex::default(),
        });
        let e = call_with_peer(&app, peer).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::ConfirmDeclined);
    }
    assert!(app.runs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn stateless_clients_get_input_required_and_others_get_a_ticket() {
    let app = asking_app();
    let stateless = Arc::new(Peer {
        elicitation: true,
        answer: Err(PeerError::InputRequired {
            requests: json!({"confirm": {"method": "elicitation/create"}}),
        }),
        asked: Mutex::default(),
    });
    let e = call_with_peer(&app, stateless).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::InputRequired);
    // No elicitation support, or the client fails: a ticket instead.
    for peer in [
        Peer {
            elicitation: false,
            answer: Ok(json!({})),
            asked: Mutex::default(),
        },
        Peer {
            elicitation: true,
            answer: Err(PeerError::Disconnected),
            asked: Mutex::default(),
        },
    ] {
        let e = call_with_peer(&app, Arc::new(peer)).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::PendingHumanConfirm);
    }
    assert_eq!(app.tools.tickets().pending().unwrap().len(), 2);
    assert!(app.runs.lock().unwrap().is_empty());
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_tickets_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tickets.db");
    let (approved, denied, waiting) = {
        let store: Arc<dyn TicketStore> = Arc::new(SqliteTicketStore::open(&path).unwrap());
        let app = app_with_store(Some(store));
        let a = ask(&app, "bulk_delete", many(51)).await;
        let d = ask(&app, "bulk_delete", many(52)).await;
        let w = ask(&app, "bulk_delete", many(53)).await;
        app.tools.tickets().approve(&a, &admin()).await.unwrap();
        app.tools.tickets().deny(&d, &admin(), Some("no")).unwrap();
        (a, d, w)
    };
    // A new process: a fresh registry over the same file.
    let store: Arc<dyn TicketStore> = Arc::new(SqliteTicketStore::open(&path).unwrap());
    let app = app_with_store(Some(store));
    let desk = app.tools.tickets();
    assert_eq!(desk.list().unwrap().len(), 3);
    assert_eq!(
        desk.result(&approved, &agent()).unwrap().all_text(),
        "deleted 51"
    );
    assert_eq!(
        desk.result(&denied, &agent()).unwrap_err().code(),
        ErrorCode::TicketDenied
    );
    assert_eq!(
        desk.approve(&approved, &admin()).await.unwrap_err().code(),
        ErrorCode::TicketAlreadyDecided
    );
    let pending = desk.pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, waiting);
    assert_eq!(pending[0].arguments, many(53));
    desk.approve(&waiting, &admin()).await.unwrap();
    let runs = app.runs.lock().unwrap();
    assert_eq!(
        runs.len(),
        1,
        "only the waiting ticket ran in the new process"
    );
    assert_eq!(runs[0].1.len(), 53);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_call_interrupted_by_a_crash_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tickets.db");
    let id = {
        let store = Arc::new(SqliteTicketStore::open(&path).unwrap());
        let app = app_with_store(Some(store.clone()));
        let id = ask(&app, "bulk_delete", many(51)).await;
        // What a process that died mid-call leaves behind: the ticket marked running.
        let mut t = store.get(&id).unwrap().unwrap();
        t.status = TicketStatus::Running;
        assert!(store.replace_if(TicketStatus::Pending, &t).unwrap());
        id
    };
    let store: Arc<dyn TicketStore> = Arc::new(SqliteTicketStore::open(&path).unwrap());
    let app = app_with_store(Some(store));
    let desk = app.tools.tickets();
    assert_eq!(desk.get(&id).unwrap().status, TicketStatus::Failed);
    let e = desk.result(&id, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(e.to_string().contains("interrupted"));
    assert_eq!(
        desk.approve(&id, &admin()).await.unwrap_err().code(),
        ErrorCode::TicketAlreadyDecided
    );
    assert!(app.runs.lock().unwrap().is_empty());
}

#[cfg(feature = "sqlite")]
#[test]
fn a_corrupt_ticket_row_is_a_store_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tickets.db");
    drop(SqliteTicketStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO confirm_tickets (id, status, created_at_ns, body) VALUES ('tk_bad', 'pending', 0, '{not json')",
        [],
    )
    .unwrap();
    drop(conn);
    let store: Arc<dyn TicketStore> = Arc::new(SqliteTicketStore::open(&path).unwrap());
    let app = app_with_store(Some(store));
    let e = app.tools.tickets().get("tk_bad").unwrap_err();
    assert_eq!(e.code(), ErrorCode::TicketStoreFailed);
    assert_eq!(
        app.tools.tickets().list().unwrap_err().code(),
        ErrorCode::TicketStoreFailed
    );
}

#[tokio::test]
async fn the_model_fetches_results_through_the_result_tool() {
    let app = app();
    let tool = app.tools.tickets().result_tool("ticket_result");
    app.tools.register(tool).unwrap();
    let id = ask(&app, "bulk_delete", many(60)).await;
    let fetch = |who: Caller, id: String| {
        let tools = app.tools.clone();
        async move {
            tools
                .call(
                    &who,
                    "ticket_result",
                    json!({"ticket": id}),
                    CallOptions::default(),
                )
                .await
                .unwrap()
        }
    };
    let out = fetch(agent(), id.clone()).await;
    assert!(out.is_error);
    assert_eq!(out.structured.unwrap()["code"], "ticket_pending");
    app.tools.tickets().approve(&id, &admin()).await.unwrap();
    let out = fetch(agent(), id.clone()).await;
    assert!(!out.is_error);
    assert_eq!(out.all_text(), "deleted 60");
    let out = fetch(Caller::new(Principal::new("mallory")), id.clone()).await;
    assert_eq!(out.structured.unwrap()["code"], "ticket_unknown");
    // Small models see it.
    let compact = agent().narrowed(&Grants::none(), SurfaceProjection::Compact);
    assert!(
        app.tools
            .list(&compact)
            .iter()
            .any(|s| s.name == "ticket_result")
    );
}

#[tokio::test]
async fn a_stateless_commit_survives_the_input_required_round_trip() {
    let app = asking_app();
    let args = many(60);
    let preview = app
        .tools
        .call(
            &agent(),
            "bulk_delete_previewed",
            args.clone(),
            CallOptions::default(),
        )
        .await
        .unwrap();
    let mut commit = args.clone();
    commit[COMMIT_TOKEN_FIELD] = preview.structured.unwrap()[COMMIT_TOKEN_FIELD].clone();
    let call = |answer: Result<Value, PeerError>| {
        let tools = app.tools.clone();
        let commit = commit.clone();
        async move {
            let peer = Arc::new(Peer {
                elicitation: true,
                answer,
                asked: Mutex::default(),
            });
            let opts = CallOptions::default().with_peer(peer);
            tools
                .call(&agent(), "bulk_delete_previewed", commit, opts)
                .await
        }
    };
    // First round: the client must answer in a new request; the token is not spent.
    let e = call(Err(PeerError::InputRequired {
        requests: json!({"confirm": {}}),
    }))
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InputRequired);
    // The re-sent call carries the answer: it commits, once.
    let out = call(Ok(
        json!({"action": "accept", "content": {"approve": true}}),
    ))
    .await
    .unwrap();
    assert_eq!(out.all_text(), "deleted 60");
    let e = call(Ok(
        json!({"action": "accept", "content": {"approve": true}}),
    ))
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CommitTokenUsed);
    // Exactly one preview and one commit ran.
    let phases: Vec<CallPhase> = app.runs.lock().unwrap().iter().map(|r| r.2).collect();
    assert_eq!(phases, [CallPhase::Preview, CallPhase::Commit]);
}

async fn forget_settled_keeps_what_is_open(app: App) {
    let desk = app.tools.tickets();
    let done = ask(&app, "bulk_delete", many(51)).await;
    let denied = ask(&app, "bulk_delete", many(52)).await;
    let open = ask(&app, "bulk_delete", many(53)).await;
    desk.approve(&done, &admin()).await.unwrap();
    desk.deny(&denied, &admin(), None).unwrap();
    // Nothing filed before the epoch.
    assert_eq!(desk.forget_settled(std::time::UNIX_EPOCH).unwrap(), 0);
    let later = std::time::SystemTime::now() + Duration::from_secs(1);
    assert_eq!(desk.forget_settled(later).unwrap(), 2);
    let left: Vec<String> = desk.list().unwrap().into_iter().map(|t| t.id).collect();
    assert_eq!(left, std::slice::from_ref(&open));
    assert_eq!(
        desk.result(&done, &agent()).unwrap_err().code(),
        ErrorCode::TicketUnknown
    );
    desk.approve(&open, &admin()).await.unwrap();
}

#[tokio::test]
async fn settled_tickets_can_be_forgotten() {
    forget_settled_keeps_what_is_open(app()).await;
    #[cfg(feature = "sqlite")]
    {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn TicketStore> =
            Arc::new(SqliteTicketStore::open(dir.path().join("t.db")).unwrap());
        forget_settled_keeps_what_is_open(app_with_store(Some(store))).await;
    }
}

#[tokio::test]
async fn the_question_shows_redacted_bounded_arguments() {
    let app = asking_app();
    app.tools
        .register(
            ToolBuilder::new("bulk_login")
                .sensitive("/password")
                .raw_handler(
                    json!({"type": "object", "properties": {
                        "ids": {"type": "array"}, "password": {"type": "string"}}}),
                    |_a, _c| async { Ok(ToolOutput::text("ok")) },
                ),
        )
        .unwrap();
    let peer = Arc::new(Peer {
        elicitation: true,
        answer: Ok(json!({"action": "accept", "content": {"approve": true}})),
        asked: Mutex::default(),
    });
    let opts = CallOptions::default().with_peer(peer.clone());
    for n in [60, 5000] {
        let mut args = many(n);
        args["password"] = json!("hunter2");
        app.tools
            .call(&agent(), "bulk_login", args, opts.clone())
            .await
            .unwrap();
    }
    let asked = peer.asked.lock().unwrap();
    let short = asked[0]["message"].as_str().unwrap();
    assert!(
        short.contains(REDACTED) && !short.contains("hunter2"),
        "{short}"
    );
    let long = asked[1]["message"].as_str().unwrap();
    assert!(
        long.len() < 1000,
        "the question stays short: {} bytes",
        long.len()
    );
}

#[tokio::test]
async fn the_desk_announces_changes() {
    let app = app();
    let desk = app.tools.tickets();
    let mut changes = desk.changes();
    let seen = *changes.borrow_and_update();
    let id = ask(&app, "bulk_delete", many(51)).await;
    assert!(changes.has_changed().unwrap());
    let after_filing = *changes.borrow_and_update();
    assert!(after_filing > seen);
    desk.approve(&id, &admin()).await.unwrap();
    assert!(changes.has_changed().unwrap());
    let after_approval = *changes.borrow_and_update();
    let id = ask(&app, "bulk_delete", many(52)).await;
    desk.deny(&id, &admin(), None).unwrap();
    assert!(*changes.borrow_and_update() > after_approval);
    // A refused decision changes nothing.
    let _ = desk.deny(&id, &admin(), None);
    assert!(!changes.has_changed().unwrap());
}

/// A lifetime too long for the clock to add (an app's "never expires", `Duration::MAX`) is the
/// farthest one the clock holds, not a panic: filing a ticket, issuing a commit token and
/// minting a handle each added it to the time of day unchecked, and panicked on every call.
#[tokio::test]
async fn lifetimes_too_long_for_the_clock_do_not_panic() {
    let forever = std::time::Duration::MAX;
    let app = app_with(
        ToolRegistry::builder()
            .confirm_policy(bulk_policy)
            .confirm_config(ConfirmConfig::default().with_ttl(forever))
            .commit_config(CommitConfig::default().with_ttl(forever)),
    );
    // A ticket that never expires: pending, then approved and run.
    let ticket = ask(&app, "bulk_delete", many(60)).await;
    let desk = app.tools.tickets();
    assert_eq!(desk.get(&ticket).unwrap().status, TicketStatus::Pending);
    desk.approve(&ticket, &admin()).await.unwrap();
    assert_eq!(app.runs.lock().unwrap().len(), 1);
    // A commit token that never expires: previewed, then committed.
    let out = app
        .tools
        .call(
            &agent(),
            "bulk_delete_previewed",
            many(3),
            CallOptions::default(),
        )
        .await
        .unwrap();
    let token = out.structured.as_ref().unwrap()[COMMIT_TOKEN_FIELD]
        .as_str()
        .unwrap()
        .to_string();
    let mut args = many(3);
    args[COMMIT_TOKEN_FIELD] = json!(token);
    let out = app
        .tools
        .call(
            &agent(),
            "bulk_delete_previewed",
            args,
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.all_text(), "deleted 3");
    // A handle minted for ever resolves.
    let codec = HandleCodec::new("app", &[7u8; 32]).unwrap();
    let h = codec.mint_for("ann", "note", "row-1", forever).unwrap();
    assert_eq!(codec.resolve("ann", "note", &h).unwrap(), "row-1");
}

/// An approval whose caller goes away while the approved call runs (the approver's request
/// dropped, say) does not leave the ticket `running` for ever: the call runs to its end and
/// its outcome is kept, as if the approver had waited. Before, dropping `approve` dropped the
/// call midway and the ticket stayed `running`, its asker told `ticket_pending` for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_dropped_midway_still_finishes_its_call() {
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let tools = ToolRegistry::builder()
        .confirm_policy(|_s: &ToolSpec, _a: &Value, _c: &Caller| Some(ConfirmRequest::new("slow")))
        .build();
    let cap = WriteCapability::new("notes.delete", "Delete notes");
    tools.declare(cap.clone()).unwrap();
    let (s, r) = (Arc::clone(&started), Arc::clone(&release));
    tools
        .register(ToolBuilder::new("slow_delete").write(cap).raw_handler(
            json!({"type": "object"}),
            move |_a, _ctx| {
                let (s, r) = (Arc::clone(&s), Arc::clone(&r));
                async move {
                    s.notify_one();
                    r.notified().await;
                    Ok(ToolOutput::text("deleted slowly"))
                }
            },
        ))
        .unwrap();
    let e = tools
        .call(&agent(), "slow_delete", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    let id = e.details()["ticket"].as_str().unwrap().to_string();
    let desk = tools.tickets();
    let mut changes = desk.changes();
    let approver = admin();
    {
        let approving = desk.approve(&id, &approver);
        tokio::pin!(approving);
        tokio::select! {
            _ = &mut approving => panic!("the call finished before it was released"),
            () = started.notified() => {}
        }
        // The approver goes away while the call runs.
    }
    release.notify_one();
    let done = tokio::time::timeout(kberg_testkit::WAIT, async {
        loop {
            let t = desk.get(&id).unwrap();
            if t.status != TicketStatus::Running {
                return t;
            }
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("the ticket stayed running");
    assert_eq!(done.status, TicketStatus::Done);
    let out = desk.result(&id, &agent()).unwrap();
    assert_eq!(out.all_text(), "deleted slowly");
}
