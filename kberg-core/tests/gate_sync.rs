//! Synchronous tools through the gate (`ToolBuilder::sync_handler` / `raw_sync_handler`), and
//! when the gate's checks run: at `call`, before the returned future is polled.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn notes_write() -> WriteCapability {
    WriteCapability::new("notes.write", "Create and edit notes")
}

fn anon() -> Caller {
    Caller::new(Principal::new("anon"))
}

fn writer() -> Caller {
    Caller::new(Principal::new("w").with_grants(Grants::of(["notes.write"])))
}

/// A registry with a typed synchronous read tool and an untyped synchronous write tool that
/// counts its runs and answers with its caller's id.
fn registry(runs: Arc<AtomicUsize>) -> ToolRegistry {
    let r = ToolRegistry::new();
    r.declare(notes_write()).unwrap();
    r.register(
        ToolBuilder::new("add")
            .sync_handler(|x: Add, _ctx| Ok(ToolOutput::text((x.a + x.b).to_string()))),
    )
    .unwrap();
    r.register(
        ToolBuilder::new("whoami").write(notes_write()).raw_sync_handler(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false}),
            move |_, ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(ctx.caller().principal().id.clone()))
            },
        ),
    )
    .unwrap();
    r
}

#[tokio::test]
async fn a_sync_tool_runs_through_every_gate_step() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = registry(Arc::clone(&runs));
    let out = r
        .call(
            &anon(),
            "add",
            json!({"a": 2, "b": 3}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.all_text(), "5");
    // It borrows the call's context: the caller is the one who called.
    let out = r
        .call(&writer(), "whoami", json!({}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(out.all_text(), "w");
    // The checks before it are the same as for any tool.
    let e = r
        .call(&anon(), "whoami", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CapabilityRequired);
    let e = r
        .call(
            &writer(),
            "whoami",
            json!({"n": "x"}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    let e = r
        .call(&anon(), "add", json!({"a": 1}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "refused calls never ran");
}

#[tokio::test]
async fn a_sync_tool_failure_panic_and_bad_output_are_contained() {
    let r = ToolRegistry::new();
    r.register(
        ToolBuilder::new("fails").raw_sync_handler(json!({"type": "object"}), |_, _| {
            Err(ToolError::failed("disk full"))
        }),
    )
    .unwrap();
    r.register(
        ToolBuilder::new("panics").raw_sync_handler(json!({"type": "object"}), |_, _| {
            if true {
                panic!("boom");
            }
            Ok(ToolOutput::default())
        }),
    )
    .unwrap();
    r.register(
        ToolBuilder::new("bad_out")
            .output_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
            .raw_sync_handler(json!({"type": "object"}), |_, _| {
                ToolOutput::json(&json!({"n": "one"}))
            }),
    )
    .unwrap();
    let e = r
        .call(&anon(), "fails", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(e.to_string().contains("disk full"));
    let e = r
        .call(&anon(), "panics", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(!e.to_string().contains("boom"));
    let e = r
        .call(&anon(), "bad_out", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
}

#[tokio::test]
async fn a_sync_tool_and_cancellation() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = registry(Arc::clone(&runs));
    // Cancelled before it ran: it never runs.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let e = r
        .call(
            &writer(),
            "whoami",
            json!({}),
            CallOptions::with_cancel(cancel),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Cancelled);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A tool that sees the token fire while it runs and stops with an error was cancelled.
    let cancel = CancellationToken::new();
    let fired = cancel.clone();
    r.register(ToolBuilder::new("stops").raw_sync_handler(
        json!({"type": "object"}),
        move |_, ctx| {
            fired.cancel();
            if ctx.is_cancelled() {
                return Err(ToolError::failed("stopped early"));
            }
            Ok(ToolOutput::text("finished"))
        },
    ))
    .unwrap();
    let e = r
        .call(
            &anon(),
            "stops",
            json!({}),
            CallOptions::with_cancel(cancel),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Cancelled);
}

#[tokio::test]
async fn sync_tools_are_audited() {
    let audit = Arc::new(MemoryAuditSink::new());
    let r = ToolRegistry::builder().audit_sink(audit.clone()).build();
    r.register(
        ToolBuilder::new("add")
            .sync_handler(|x: Add, _ctx| Ok(ToolOutput::text((x.a + x.b).to_string()))),
    )
    .unwrap();
    r.call(
        &anon(),
        "add",
        json!({"a": 1, "b": 1}),
        CallOptions::default(),
    )
    .await
    .unwrap();
    let _ = r
        .call(&anon(), "add", json!({}), CallOptions::default())
        .await;
    let outcomes: Vec<AuditOutcome> = audit.events().iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AuditOutcome::Ok,
            AuditOutcome::Error(ErrorCode::InvalidArguments)
        ]
    );
}

#[test]
fn the_checks_run_at_call_and_the_tool_only_when_polled() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = registry(Arc::clone(&runs));
    // A refusal is decided at `call`: its future is ready on the first poll.
    let a = anon();
    let refused = r.call(&a, "nope", json!({}), CallOptions::default());
    let e = refused.now_or_never().expect("ready").unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);

    // A future that is never polled never runs the tool.
    let w = writer();
    drop(r.call(&w, "whoami", json!({}), CallOptions::default()));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // The call was admitted against the tools registered at `call`: a tool removed before
    // its future is polled still finishes that call (as one removed mid-call does).
    let pending = r.call(&w, "whoami", json!({}), CallOptions::default());
    assert!(r.remove("whoami"));
    let out = pending.now_or_never().expect("ready").unwrap();
    assert_eq!(out.all_text(), "w");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let e = r
        .call(&w, "whoami", json!({}), CallOptions::default())
        .now_or_never()
        .expect("ready")
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);
}

#[test]
fn a_call_polled_again_after_it_answered_does_not_run_the_tool_again() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    let runs = Arc::new(AtomicUsize::new(0));
    let r = registry(Arc::clone(&runs));
    let async_runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&async_runs);
    r.register(
        ToolBuilder::new("counted").raw_handler(json!({"type": "object"}), move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(ToolOutput::text("ran")) }
        }),
    )
    .unwrap();
    let w = writer();
    let mut cx = Context::from_waker(Waker::noop());
    for (tool, ran) in [("whoami", &runs), ("counted", &async_runs)] {
        let mut call = pin!(r.call(&w, tool, json!({}), CallOptions::default()));
        let Poll::Ready(first) = call.as_mut().poll(&mut cx) else {
            panic!("{tool} finishes on its first poll");
        };
        assert!(first.is_ok(), "{tool}: {first:?}");
        // A second poll is the caller's bug: it answers an error, and the tool does not run
        // again (with arguments the first run already took).
        let Poll::Ready(again) = call.as_mut().poll(&mut cx) else {
            panic!("{tool}: a finished call answers at once");
        };
        let again = again.unwrap_err();
        assert_eq!(again.code(), ErrorCode::ToolFailed, "{tool}");
        assert!(again.to_string().contains("already answered"), "{again}");
        assert_eq!(ran.load(Ordering::SeqCst), 1, "{tool} ran once");
    }
    // An audited call (the gate's boxed future) too: recorded once.
    let audit = Arc::new(MemoryAuditSink::new());
    let audited = ToolRegistry::builder().audit_sink(audit.clone()).build();
    let audited_runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&audited_runs);
    audited
        .register(ToolBuilder::new("counted").raw_handler(
            json!({"type": "object"}),
            move |_, _| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Ok(ToolOutput::text("ran")) }
            },
        ))
        .unwrap();
    let mut call = pin!(audited.call(&w, "counted", json!({}), CallOptions::default()));
    let Poll::Ready(first) = call.as_mut().poll(&mut cx) else {
        panic!("an audited call finishes on its first poll");
    };
    assert!(first.is_ok(), "{first:?}");
    let Poll::Ready(again) = call.as_mut().poll(&mut cx) else {
        panic!("a finished audited call answers at once");
    };
    assert_eq!(again.unwrap_err().code(), ErrorCode::ToolFailed);
    assert_eq!(
        audited_runs.load(Ordering::SeqCst),
        1,
        "the audited tool ran once"
    );
    assert_eq!(audit.events().len(), 1, "one audit event");
    // A refusal too.
    let a = anon();
    let mut refused = pin!(r.call(&a, "nope", json!({}), CallOptions::default()));
    let Poll::Ready(first) = refused.as_mut().poll(&mut cx) else {
        panic!("a refusal is ready at once");
    };
    assert_eq!(first.unwrap_err().code(), ErrorCode::UnknownTool);
    let Poll::Ready(again) = refused.as_mut().poll(&mut cx) else {
        panic!("a finished call answers at once");
    };
    assert_eq!(again.unwrap_err().code(), ErrorCode::ToolFailed);
}
