//! The bounds on what one principal can make the gate hold for it: pending confirm tickets
//! (`ConfirmConfig::max_pending_per_principal`, refused `too_many_pending_tickets` with nothing
//! filed; expired tickets do not count; in memory and in SQLite, including a SQLite file made
//! before tickets had a principal column) and commit tokens (`CommitConfig`: a principal that
//! floods previews loses its own oldest tokens, never another principal's).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Bulk {
    /// Ids of notes to delete.
    ids: Vec<u32>,
}

/// Holds calls that delete more than 50 notes for a person.
fn bulk_policy(spec: &ToolSpec, args: &Value, _c: &Caller) -> Option<ConfirmRequest> {
    let n = args["ids"].as_array().map_or(0, Vec::len);
    (n > 50).then(|| ConfirmRequest::new(format!("`{}` deletes {n} notes", spec.name)))
}

/// A registry with `bulk_delete` (and its previewed twin) counting its runs that are not
/// previews in `runs`.
fn registry(builder: ToolRegistryBuilder, runs: &Arc<AtomicUsize>) -> ToolRegistry {
    let tools = builder.build();
    let cap = WriteCapability::new("notes.delete", "Delete notes");
    tools.declare(cap.clone()).unwrap();
    for (name, previews) in [("bulk_delete", false), ("bulk_delete_previewed", true)] {
        let runs = Arc::clone(runs);
        let mut b = ToolBuilder::new(name)
            .description("Delete many notes")
            .write(cap.clone());
        if previews {
            b = b.previews();
        }
        tools
            .register(b.handler(move |a: Bulk, ctx| {
                let runs = Arc::clone(&runs);
                async move {
                    if !ctx.is_preview() {
                        runs.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(ToolOutput::text(format!("deleted {}", a.ids.len())))
                }
            }))
            .unwrap();
    }
    tools
}

/// A registry holding big deletes for a person, its tickets in `store`.
fn confirming(
    store: &Arc<dyn TicketStore>,
    config: ConfirmConfig,
    runs: &Arc<AtomicUsize>,
) -> ToolRegistry {
    registry(
        ToolRegistry::builder()
            .confirm_policy(bulk_policy)
            .confirm_config(config)
            .ticket_store(Arc::clone(store)),
        runs,
    )
}

fn agent(id: &str) -> Caller {
    Caller::new(Principal::new(id).with_grants(Grants::of(["notes.delete"])))
}

fn admin() -> Principal {
    Principal::new("alice").with_grants(Grants::of(["kberg.confirm"]))
}

/// `n` ids starting at `from`, so each call's arguments differ.
fn ids(from: u32, n: u32) -> Value {
    json!({"ids": (from..from + n).collect::<Vec<u32>>()})
}

/// Calls `tool` as `who` with a big delete; the refusal it answers.
async fn big_delete(tools: &ToolRegistry, who: &str, tool: &str, from: u32) -> GateError {
    tools
        .call(&agent(who), tool, ids(from, 60), CallOptions::default())
        .await
        .unwrap_err()
}

/// Files a ticket as `who`; its id.
async fn file(tools: &ToolRegistry, who: &str, from: u32) -> String {
    let e = big_delete(tools, who, "bulk_delete", from).await;
    assert_eq!(e.code(), ErrorCode::PendingHumanConfirm, "{e}");
    e.details()["ticket"].as_str().unwrap().to_string()
}

/// The stores every ticket test runs against.
fn stores() -> Vec<(&'static str, Arc<dyn TicketStore>)> {
    vec![
        ("memory", Arc::new(MemoryTicketStore::new())),
        #[cfg(feature = "sqlite")]
        (
            "sqlite",
            Arc::new(SqliteTicketStore::open_in_memory().unwrap()),
        ),
    ]
}

async fn the_pending_limit_holds(name: &str, store: Arc<dyn TicketStore>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let config = ConfirmConfig::default().with_max_pending_per_principal(3);
    let tools = confirming(&store, config, &runs);
    let desk = tools.tickets();
    let mut filed = Vec::new();
    for i in 0..3 {
        filed.push(file(&tools, "agent-1", i * 100).await);
    }
    let now = SystemTime::now();
    assert_eq!(store.count_pending("agent-1", now).unwrap(), 3, "{name}");

    // One more is refused, with the stable code and a sentence, and nothing is filed: a direct
    // write, and the commit of a previewed one (previews themselves are never held).
    let token = preview(&tools, "agent-1", ids(900, 60)).await;
    let committed = commit(&tools, "agent-1", &ids(900, 60), &token).await;
    for (tool, refused) in [
        (
            "bulk_delete",
            Err(big_delete(&tools, "agent-1", "bulk_delete", 900).await),
        ),
        ("bulk_delete_previewed", committed),
    ] {
        let e = refused.unwrap_err();
        assert_eq!(e.code(), ErrorCode::TooManyPendingTickets, "{name}: {e}");
        assert!(!e.code().is_retryable());
        let d = e.details();
        assert_eq!(d["code"], "too_many_pending_tickets");
        assert_eq!(d["tool"], tool);
        assert_eq!(d["retryable"], false);
        let sentence = e.to_string();
        assert!(sentence.contains("3 calls waiting"), "{sentence}");
        assert!(
            sentence.contains("wait until a person has decided"),
            "{sentence}"
        );
    }
    assert_eq!(desk.list().unwrap().len(), 3, "{name}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // Another principal still files.
    file(&tools, "agent-2", 0).await;
    assert_eq!(store.count_pending("agent-2", now).unwrap(), 1, "{name}");

    // A decision makes room again: decided tickets do not count. The refused commit kept its
    // token: sent again as it was, it files its ticket now.
    desk.deny(&filed[0], &admin(), None).unwrap();
    let again = commit(&tools, "agent-1", &ids(900, 60), &token)
        .await
        .unwrap_err();
    assert_eq!(
        again.code(),
        ErrorCode::PendingHumanConfirm,
        "{name}: {again}"
    );
    let e = big_delete(&tools, "agent-1", "bulk_delete", 1100).await;
    assert_eq!(e.code(), ErrorCode::TooManyPendingTickets, "{name}");
    desk.approve(&filed[1], &admin()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    file(&tools, "agent-1", 1200).await;
    assert_eq!(
        store.count_pending("agent-1", SystemTime::now()).unwrap(),
        3,
        "{name}"
    );
}

#[tokio::test]
async fn a_principal_at_its_pending_limit_is_refused_while_another_still_files() {
    for (name, store) in stores() {
        the_pending_limit_holds(name, store).await;
    }
}

async fn expired_tickets_are_not_counted(name: &str, store: Arc<dyn TicketStore>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let limit = ConfirmConfig::default().with_max_pending_per_principal(2);
    // Tickets that expire as they are filed: past the limit, none is refused.
    let expiring = confirming(&store, limit.clone().with_ttl(Duration::ZERO), &runs);
    for i in 0..5 {
        file(&expiring, "agent-1", i * 100).await;
    }
    let desk = expiring.tickets();
    assert_eq!(desk.list().unwrap().len(), 5, "{name}");
    assert!(
        desk.list()
            .unwrap()
            .iter()
            .all(|t| t.status == TicketStatus::Expired)
    );
    assert_eq!(
        store.count_pending("agent-1", SystemTime::now()).unwrap(),
        0,
        "{name}"
    );

    // The same store with tickets that wait: the limit counts only those.
    let waiting = confirming(&store, limit, &runs);
    file(&waiting, "agent-1", 1000).await;
    file(&waiting, "agent-1", 1100).await;
    let e = big_delete(&waiting, "agent-1", "bulk_delete", 1200).await;
    assert_eq!(e.code(), ErrorCode::TooManyPendingTickets, "{name}");
    assert_eq!(desk.list().unwrap().len(), 7, "{name}");
    assert_eq!(desk.pending().unwrap().len(), 2, "{name}");
}

#[tokio::test]
async fn expired_tickets_do_not_count_against_the_limit() {
    for (name, store) in stores() {
        expired_tickets_are_not_counted(name, store).await;
    }
}

#[test]
fn the_limits_have_documented_defaults() {
    assert_eq!(ConfirmConfig::default().max_pending_per_principal, 100);
    assert_eq!(
        ConfirmConfig::default()
            .with_max_pending_per_principal(0)
            .max_pending_per_principal,
        1
    );
    let commit = CommitConfig::default();
    assert_eq!(commit.max_tokens, 10_000);
    assert_eq!(commit.max_tokens_per_principal, 100);
}

/// A SQLite file made before tickets had `principal` and `expires_at_ns` columns gains them,
/// filled from the stored tickets, so its pending tickets count.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn an_older_sqlite_file_counts_its_pending_tickets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tickets.db");
    let runs = Arc::new(AtomicUsize::new(0));
    let limit = ConfirmConfig::default().with_max_pending_per_principal(2);
    {
        let store: Arc<dyn TicketStore> = Arc::new(SqliteTicketStore::open(&path).unwrap());
        let tools = confirming(&store, limit.clone(), &runs);
        file(&tools, "agent-1", 0).await;
        file(&tools, "agent-1", 100).await;
    }
    // Back to the old table: no index, no principal or expiry column.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP INDEX confirm_tickets_pending;
         ALTER TABLE confirm_tickets DROP COLUMN principal;
         ALTER TABLE confirm_tickets DROP COLUMN expires_at_ns;",
    )
    .unwrap();
    drop(conn);

    let store: Arc<dyn TicketStore> = Arc::new(SqliteTicketStore::open(&path).unwrap());
    assert_eq!(
        store.count_pending("agent-1", SystemTime::now()).unwrap(),
        2
    );
    let tools = confirming(&store, limit, &runs);
    let e = big_delete(&tools, "agent-1", "bulk_delete", 200).await;
    assert_eq!(e.code(), ErrorCode::TooManyPendingTickets);
    file(&tools, "agent-2", 0).await;
}

/// Previews `bulk_delete_previewed` as `who`; the commit token.
async fn preview(tools: &ToolRegistry, who: &str, args: Value) -> String {
    let out = tools
        .call(
            &agent(who),
            "bulk_delete_previewed",
            args,
            CallOptions::default(),
        )
        .await
        .unwrap();
    let s = out.structured.unwrap();
    assert_eq!(s["status"], "preview");
    s[COMMIT_TOKEN_FIELD].as_str().unwrap().to_string()
}

/// Commits `bulk_delete_previewed` as `who` with `token`.
async fn commit(
    tools: &ToolRegistry,
    who: &str,
    args: &Value,
    token: &str,
) -> Result<ToolOutput, GateError> {
    let mut args = args.clone();
    args[COMMIT_TOKEN_FIELD] = json!(token);
    tools
        .call(
            &agent(who),
            "bulk_delete_previewed",
            args,
            CallOptions::default(),
        )
        .await
}

#[tokio::test]
async fn a_principal_flooding_previews_cannot_invalidate_another_principals_token() {
    let runs = Arc::new(AtomicUsize::new(0));
    let config = CommitConfig::default()
        .with_max_tokens(50)
        .with_max_tokens_per_principal(20);
    let tools = registry(ToolRegistry::builder().commit_config(config), &runs);

    let bob_args = ids(0, 3);
    let bob = preview(&tools, "bob", bob_args.clone()).await;
    let mallory_first_args = ids(1000, 3);
    let mallory_first = preview(&tools, "mallory", mallory_first_args.clone()).await;
    let mut last = (Value::Null, String::new());
    for i in 0..500 {
        let args = ids(2000 + i, 3);
        last = (args.clone(), preview(&tools, "mallory", args).await);
    }
    // Several principals between them filling the store do not reach bob's either.
    for i in 0..10 {
        for j in 0..5 {
            preview(&tools, &format!("p{i}"), ids(10_000 + i * 10 + j, 3)).await;
        }
    }

    let out = commit(&tools, "bob", &bob_args, &bob).await.unwrap();
    assert_eq!(out.all_text(), "deleted 3");
    // The flood cost mallory its own oldest tokens, and left its newest.
    let e = commit(&tools, "mallory", &mallory_first_args, &mallory_first)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CommitTokenInvalid);
    let (args, token) = last;
    commit(&tools, "mallory", &args, &token).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_default_per_principal_bound_protects_others_under_the_default_cap() {
    let runs = Arc::new(AtomicUsize::new(0));
    // A store sized below one principal's default bound: only the global rule applies.
    let tools = registry(
        ToolRegistry::builder().commit_config(CommitConfig::default().with_max_tokens(30)),
        &runs,
    );
    let bob_args = ids(0, 3);
    let bob = preview(&tools, "bob", bob_args.clone()).await;
    for i in 0..200 {
        preview(&tools, "mallory", ids(1000 + i, 3)).await;
    }
    commit(&tools, "bob", &bob_args, &bob).await.unwrap();
}
