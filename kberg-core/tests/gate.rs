//! The gate through the public API: registration errors, every stable refusal code in order,
//! projection, deprecated capabilities, cancellation, panics, concurrency and audit.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct AddNote {
    title: String,
    priority: Option<u8>,
}

fn notes_write() -> WriteCapability {
    WriteCapability::new("notes.write", "Create and edit notes")
}

fn registry() -> ToolRegistry {
    registry_with(ToolRegistry::builder())
}

fn registry_with(builder: ToolRegistryBuilder) -> ToolRegistry {
    let r = builder.build();
    r.declare(notes_write()).unwrap();
    r.register(
        ToolBuilder::new("search")
            .description("search notes")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false}),
                |a, _| async move { Ok(ToolOutput::text(format!("found {}", a["q"].as_str().unwrap_or("")))) },
            ),
    )
    .unwrap();
    r.register(ToolBuilder::new("add_note").write(notes_write()).handler(
        |a: AddNote, _| async move { Ok(ToolOutput::text(format!("added {}", a.title))) },
    ))
    .unwrap();
    r.register(
        ToolBuilder::new("quick_add")
            .write(notes_write())
            .small_model_safe()
            .handler(|a: AddNote, _| async move { Ok(ToolOutput::text(a.title)) }),
    )
    .unwrap();
    r.refuse(
        "delete_all",
        "Bulk deletion is not offered; delete notes one at a time.",
    )
    .unwrap();
    r
}

fn anon() -> Caller {
    Caller::new(Principal::new("anon"))
}

fn writer() -> Caller {
    Caller::new(Principal::new("w").with_grants(Grants::of(["notes.write"])))
}

async fn call(
    r: &ToolRegistry,
    c: &Caller,
    name: &str,
    args: Value,
) -> Result<ToolOutput, GateError> {
    r.call(c, name, args, CallOptions::default()).await
}

#[tokio::test]
async fn read_and_write_through_the_gate() {
    let r = registry();
    let out = call(&r, &anon(), "search", json!({"q": "rust"}))
        .await
        .unwrap();
    assert_eq!(out.all_text(), "found rust");
    assert!(!out.is_error);
    let out = call(&r, &writer(), "add_note", json!({"title": "t"}))
        .await
        .unwrap();
    assert_eq!(out.all_text(), "added t");
}

#[tokio::test]
async fn unknown_tool() {
    let e = call(&registry(), &anon(), "nope", json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);
    assert_eq!(e.details()["code"], "unknown_tool");
}

#[tokio::test]
async fn refusal_answers_with_its_reason_and_is_not_listed() {
    let r = registry();
    let e = call(&r, &writer(), "delete_all", json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Refused);
    assert_eq!(
        e.details()["reason"],
        "Bulk deletion is not offered; delete notes one at a time."
    );
    assert!(!r.list(&writer()).iter().any(|t| t.name == "delete_all"));
    // A refused name cannot be registered as a tool afterwards.
    let dup = r.register(
        ToolBuilder::new("delete_all").raw_handler(json!({"type":"object"}), |_, _| async {
            Ok(ToolOutput::default())
        }),
    );
    assert!(matches!(dup, Err(CoreError::Duplicate { .. })));
}

#[tokio::test]
async fn capability_required_names_the_capability_before_validation() {
    let r = registry();
    // Invalid arguments AND no capability: the caller learns only about the capability.
    let e = call(&r, &anon(), "add_note", json!({"title": 5, "bogus": true}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CapabilityRequired);
    assert_eq!(e.details()["capability"], "notes.write");
    assert!(e.to_string().contains("notes.write"));
    assert!(e.to_output().is_error);
}

#[tokio::test]
async fn not_in_surface_for_compact_callers() {
    let r = registry();
    let compact = Caller::new(
        Principal::new("small")
            .with_grants(Grants::of(["notes.write"]))
            .with_projection(SurfaceProjection::Compact),
    );
    let e = call(&r, &compact, "add_note", json!({"title": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotInSurface);
    let names: Vec<String> = r.list(&compact).into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["search", "quick_add"]);
    // Compact hides writes whose capability is not granted; Full lists them.
    let compact_ro = Caller::new(Principal::new("s").with_projection(SurfaceProjection::Compact));
    let names: Vec<String> = r.list(&compact_ro).into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["search"]);
    let names: Vec<String> = r.list(&anon()).into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["search", "add_note", "quick_add"]);
}

#[tokio::test]
async fn session_narrowing_removes_grants() {
    let r = registry();
    let narrowed = writer().narrowed(&Grants::none(), SurfaceProjection::Full);
    let e = call(&r, &narrowed, "add_note", json!({"title": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CapabilityRequired);
}

#[tokio::test]
async fn invalid_arguments_name_every_field() {
    let r = registry();
    let e = call(
        &r,
        &writer(),
        "add_note",
        json!({"priority": "high", "extra": 1}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    let GateError::InvalidArguments { errors, .. } = &e else {
        panic!("wrong variant {e:?}")
    };
    let pointers: Vec<&str> = errors.iter().map(|f| f.pointer.as_str()).collect();
    assert!(pointers.contains(&"/title"), "{pointers:?}");
    assert!(pointers.contains(&"/priority"), "{pointers:?}");
    assert!(pointers.contains(&"/extra"), "{pointers:?}");
    let d = e.details();
    assert_eq!(d["retryable"], true);
    assert_eq!(d["errors"].as_array().unwrap().len(), errors.len());
    let text = e.to_string();
    assert!(
        text.contains("`title`") && text.contains("`priority`"),
        "{text}"
    );
}

#[tokio::test]
async fn non_object_arguments_and_null() {
    let r = registry();
    for bad in [json!([1]), json!("x"), json!(3)] {
        let e = call(&r, &anon(), "search", bad).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArguments);
    }
    // Null is treated as "no arguments": here, a missing required field.
    let e = call(&r, &anon(), "search", Value::Null).await.unwrap_err();
    let GateError::InvalidArguments { errors, .. } = e else {
        panic!()
    };
    assert_eq!(errors[0].pointer, "/q");
    assert_eq!(errors[0].found, "missing");
}

#[tokio::test]
async fn enum_violation() {
    let r = ToolRegistry::new();
    r.register(ToolBuilder::new("mode").raw_handler(
        json!({"type": "object", "properties": {"m": {"enum": ["fast", "slow"]}}}),
        |_, _| async { Ok(ToolOutput::default()) },
    ))
    .unwrap();
    let e = call(&r, &anon(), "mode", json!({"m": "medium"}))
        .await
        .unwrap_err();
    let GateError::InvalidArguments { errors, .. } = e else {
        panic!()
    };
    assert_eq!(errors[0].pointer, "/m");
    assert!(errors[0].expected.contains("\"fast\""));
}

#[test]
fn registration_errors() {
    let r = ToolRegistry::new();
    // Undeclared capability.
    let e = r
        .register(
            ToolBuilder::new("w")
                .write(notes_write())
                .raw_handler(json!({"type":"object"}), |_, _| async {
                    Ok(ToolOutput::default())
                }),
        )
        .unwrap_err();
    assert!(matches!(e, CoreError::UndeclaredCapability { .. }), "{e}");
    // Non-compiling schema.
    let e = r
        .register(
            ToolBuilder::new("s").raw_handler(json!({"type": "frobnicate"}), |_, _| async {
                Ok(ToolOutput::default())
            }),
        )
        .unwrap_err();
    assert!(
        matches!(e, CoreError::InvalidSchema { which: "input", .. }),
        "{e}"
    );
    let e = r
        .register(
            ToolBuilder::new("o")
                .output_schema(json!({"minimum": "x"}))
                .raw_handler(json!({"type": "object"}), |_, _| async {
                    Ok(ToolOutput::default())
                }),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::InvalidSchema {
                which: "output",
                ..
            }
        ),
        "{e}"
    );
    // Invalid name.
    let e = r
        .register(
            ToolBuilder::new("bad name")
                .raw_handler(json!({}), |_, _| async { Ok(ToolOutput::default()) }),
        )
        .unwrap_err();
    assert!(matches!(e, CoreError::InvalidName { .. }));
    // Duplicate.
    let t =
        || ToolBuilder::new("t").raw_handler(json!({}), |_, _| async { Ok(ToolOutput::default()) });
    r.register(t()).unwrap();
    assert!(matches!(r.register(t()), Err(CoreError::Duplicate { .. })));
    // Batch registration is all or none.
    let batch: Vec<Arc<dyn Tool>> = vec![
        Arc::new(
            ToolBuilder::new("b1")
                .raw_handler(json!({}), |_, _| async { Ok(ToolOutput::default()) }),
        ),
        Arc::new(t()),
    ];
    assert!(r.register_all(batch).is_err());
    assert!(r.spec("b1").is_none());
    // Capabilities: duplicate declaration.
    r.declare(notes_write()).unwrap();
    assert!(matches!(
        r.declare(notes_write()),
        Err(CoreError::DuplicateCapability { .. })
    ));
}

#[tokio::test]
async fn deprecated_capability_keeps_working_and_is_audited() {
    let audit = Arc::new(MemoryAuditSink::new());
    let r = ToolRegistry::builder().audit_sink(audit.clone()).build();
    r.declare(WriteCapability::new("notes.edit", "Edit notes"))
        .unwrap();
    r.declare(WriteCapability::new("notes.write", "Old name").deprecated("notes.edit"))
        .unwrap();
    r.register(
        ToolBuilder::new("edit")
            .write(WriteCapability::new("notes.edit", "Edit notes"))
            .raw_handler(json!({"type":"object"}), |_, _| async {
                Ok(ToolOutput::text("ok"))
            }),
    )
    .unwrap();
    let old = Caller::new(Principal::new("old-client").with_grants(Grants::of(["notes.write"])));
    assert_eq!(
        call(&r, &old, "edit", json!({})).await.unwrap().all_text(),
        "ok"
    );
    let events = audit.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].via_deprecated.as_deref(), Some("notes.write"));
    assert_eq!(events[0].capability.as_deref(), Some("notes.edit"));
}

#[tokio::test]
async fn cancellation_drops_a_tool_that_ignores_it() {
    let r = ToolRegistry::new();
    let finished = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Notify::new());
    let (f, s) = (finished.clone(), started.clone());
    r.register(
        ToolBuilder::new("slow").raw_handler(json!({"type":"object"}), move |_, _| {
            let (f, s) = (f.clone(), s.clone());
            async move {
                s.notify_one();
                // Never completes on its own within the test: only the cancel ends the call.
                std::future::pending::<()>().await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text("done"))
            }
        }),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    // Cancel only once the tool runs, so the test proves a running tool is dropped (a cancel
    // before the start would be refused before the tool runs, which another test covers).
    let s = started.clone();
    let canceller = tokio::spawn(async move {
        s.notified().await;
        c2.cancel();
    });
    let e = r
        .call(&anon(), "slow", json!({}), CallOptions::with_cancel(cancel))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Cancelled);
    canceller.await.unwrap();
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cooperative_tool_sees_the_token() {
    let r = ToolRegistry::new();
    let observed = Arc::new(AtomicUsize::new(0));
    let o = observed.clone();
    let started = Arc::new(tokio::sync::Notify::new());
    let seen = Arc::new(tokio::sync::Notify::new());
    let (st, se) = (started.clone(), seen.clone());
    r.register(
        ToolBuilder::new("watcher").raw_handler(json!({"type":"object"}), move |_, ctx| {
            let (o, st, se) = (o.clone(), st.clone(), se.clone());
            async move {
                // Observe the token from a task that outlives the dropped call future.
                let token = ctx.cancellation().clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    o.fetch_add(1, Ordering::SeqCst);
                    se.notify_one();
                });
                st.notify_one();
                std::future::pending::<()>().await;
                Ok(ToolOutput::default())
            }
        }),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let h = tokio::spawn({
        let r = r.clone();
        async move {
            r.call(&anon(), "watcher", json!({}), CallOptions::with_cancel(c2))
                .await
        }
    });
    started.notified().await;
    cancel.cancel();
    assert_eq!(h.await.unwrap().unwrap_err().code(), ErrorCode::Cancelled);
    tokio::time::timeout(Duration::from_secs(30), seen.notified())
        .await
        .expect("the tool's task saw the cancellation");
    assert_eq!(observed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_tool_that_stops_on_cancellation_answers_cancelled() {
    let r = ToolRegistry::new();
    let started = Arc::new(tokio::sync::Notify::new());
    let st = started.clone();
    r.register(
        ToolBuilder::new("stops").raw_handler(json!({"type":"object"}), move |_, ctx| {
            let st = st.clone();
            async move {
                st.notify_one();
                tokio::select! {
                    () = std::future::pending::<()>() => Ok(ToolOutput::text("done")),
                    () = ctx.cancellation().cancelled() => Err(ToolError::failed("stopped early")),
                }
            }
        }),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    // Cancel only once the tool runs (see `cancellation_drops_a_tool_that_ignores_it`).
    tokio::spawn(async move {
        started.notified().await;
        c2.cancel();
    });
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
async fn a_call_without_a_token_runs_a_pending_tool_to_its_end() {
    // Default options carry no token: the gate has nothing to race, and the tool's context
    // creates a token (never fired) only when the tool asks for one.
    let r = ToolRegistry::new();
    r.register(ToolBuilder::new("waits").raw_handler(
        json!({"type":"object"}),
        |_, ctx| async move {
            tokio::task::yield_now().await;
            let token = ctx.cancellation().clone();
            tokio::task::yield_now().await;
            Ok(ToolOutput::text(format!(
                "cancelled: {}",
                token.is_cancelled() || ctx.is_cancelled()
            )))
        },
    ))
    .unwrap();
    let out = r
        .call(&anon(), "waits", json!({}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(out.all_text(), "cancelled: false");
}

#[tokio::test]
async fn already_cancelled_call_does_not_run() {
    let r = registry();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let e = r
        .call(
            &anon(),
            "search",
            json!({"q": "x"}),
            CallOptions::with_cancel(cancel),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Cancelled);
}

#[tokio::test]
async fn tool_failure_and_panic_are_contained() {
    let r = ToolRegistry::new();
    r.register(
        ToolBuilder::new("fails").raw_handler(json!({"type":"object"}), |_, _| async {
            Err(ToolError::failed("disk full"))
        }),
    )
    .unwrap();
    r.register(
        ToolBuilder::new("panics").raw_handler(json!({"type":"object"}), |_, _| async {
            if true {
                panic!("boom");
            }
            Ok(ToolOutput::default())
        }),
    )
    .unwrap();
    let e = call(&r, &anon(), "fails", json!({})).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(e.to_string().contains("disk full"));
    let e = call(&r, &anon(), "panics", json!({})).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(
        !e.to_string().contains("boom"),
        "panic payloads are not shown to models"
    );
    // The registry keeps serving.
    assert_eq!(r.len(), 2);
}

#[tokio::test]
async fn a_panic_before_the_tool_s_future_is_contained() {
    // A raw handler whose closure reads its arguments before it returns its future: the
    // closure itself panics on arguments without `n`.
    let r = ToolRegistry::new();
    r.register(ToolBuilder::new("reads_first").raw_handler(
        json!({"type": "object"}),
        |a: Value, _| {
            let n = a["n"].as_i64().expect("n is there");
            async move { Ok(ToolOutput::text(n.to_string())) }
        },
    ))
    .unwrap();
    let e = call(&r, &anon(), "reads_first", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(e, GateError::ToolPanicked { .. }), "{e:?}");
    assert!(!e.to_string().contains("n is there"), "{e}");
    // The same tool with its argument runs as ever.
    let out = call(&r, &anon(), "reads_first", json!({"n": 4}))
        .await
        .unwrap();
    assert_eq!(out.content, vec![Content::Text("4".into())]);
}

#[tokio::test]
async fn output_schema_is_enforced() {
    let r = ToolRegistry::new();
    r.register(
        ToolBuilder::new("typed_out")
            .output_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
            .raw_handler(json!({"type":"object"}), |a, _| async move {
                if a.get("good").is_some() {
                    ToolOutput::json(&json!({"n": 1}))
                } else {
                    ToolOutput::json(&json!({"n": "one"}))
                }
            }),
    )
    .unwrap();
    let ok = call(&r, &anon(), "typed_out", json!({"good": true}))
        .await
        .unwrap();
    assert_eq!(ok.structured, Some(json!({"n": 1})));
    let e = call(&r, &anon(), "typed_out", json!({})).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
}

#[tokio::test]
async fn calling_while_the_tool_is_removed() {
    let r = ToolRegistry::new();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let signals = Arc::new(std::sync::Mutex::new(Some((started_tx, release_rx))));
    r.register(
        ToolBuilder::new("long").raw_handler(json!({"type":"object"}), move |_, _| {
            let signals = signals.lock().unwrap().take();
            async move {
                // Runs until the test has removed the tool.
                if let Some((started, release)) = signals {
                    let _ = started.send(());
                    let _ = release.await;
                }
                Ok(ToolOutput::text("finished"))
            }
        }),
    )
    .unwrap();
    let mut changes = r.changes();
    let running = tokio::spawn({
        let r = r.clone();
        async move {
            r.call(&anon(), "long", json!({}), CallOptions::default())
                .await
        }
    });
    started_rx.await.unwrap();
    assert!(r.remove("long"));
    assert!(changes.has_changed().unwrap());
    changes.mark_unchanged();
    release_tx.send(()).unwrap();
    // The running call finishes; a new one sees the tool gone.
    assert_eq!(running.await.unwrap().unwrap().all_text(), "finished");
    let e = call(&r, &anon(), "long", json!({})).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);
    assert!(!r.remove("long"));
}

#[tokio::test]
async fn concurrent_calls_and_registrations() {
    let r = registry();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..200 {
                let name = format!("t{i}_{j}");
                r.register(
                    ToolBuilder::new(name.clone())
                        .raw_handler(json!({"type":"object"}), |_, _| async {
                            Ok(ToolOutput::text("x"))
                        }),
                )
                .unwrap();
                let out = r
                    .call(&anon(), "search", json!({"q": "a"}), CallOptions::default())
                    .await
                    .unwrap();
                assert_eq!(out.all_text(), "found a");
                if j % 2 == 0 {
                    assert!(r.remove(&name));
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(r.len(), 3 + 8 * 100);
}

#[tokio::test]
async fn every_call_is_audited() {
    let audit = Arc::new(MemoryAuditSink::new());
    let r = registry_with(ToolRegistry::builder().audit_sink(audit.clone()));
    let _ = call(&r, &anon(), "search", json!({"q": "a"})).await;
    let _ = call(&r, &anon(), "add_note", json!({"title": "a"})).await;
    let _ = call(&r, &anon(), "nope", json!({})).await;
    let _ = call(&r, &writer(), "add_note", json!({})).await;
    let ev = audit.events();
    let summary: Vec<(&str, &str, AuditOutcome)> = ev
        .iter()
        .map(|e| (e.tool.as_str(), e.kind, e.outcome))
        .collect();
    assert_eq!(
        summary,
        [
            ("search", "read", AuditOutcome::Ok),
            (
                "add_note",
                "write",
                AuditOutcome::Error(ErrorCode::CapabilityRequired)
            ),
            (
                "nope",
                "unknown",
                AuditOutcome::Error(ErrorCode::UnknownTool)
            ),
            (
                "add_note",
                "write",
                AuditOutcome::Error(ErrorCode::InvalidArguments)
            ),
        ]
    );
    assert_eq!(ev[1].principal, "anon");
    assert_eq!(ev[3].principal, "w");
    // Events carry no argument values.
    let serialized = serde_json::to_string(&ev[0]).unwrap();
    assert!(!serialized.contains("\"a\""), "{serialized}");
}

#[tokio::test]
async fn list_pagination() {
    let r = ToolRegistry::new();
    for i in 0..25 {
        r.register(
            ToolBuilder::new(format!("tool_{i:02}"))
                .raw_handler(json!({}), |_, _| async { Ok(ToolOutput::default()) }),
        )
        .unwrap();
    }
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = r.list_page(&anon(), cursor.as_deref(), 10).unwrap();
        names.extend(page.items.into_iter().map(|t| t.name));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(names.len(), 25);
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    assert!(r.list_page(&anon(), Some("garbage"), 10).is_err());
    assert!(r.list_page(&anon(), Some("k1zz"), 10).is_err());
}

#[tokio::test]
async fn check_runs_the_first_steps_only() {
    let r = registry();
    assert!(
        r.check(&writer(), "add_note", &json!({"title": "x"}))
            .is_ok()
    );
    assert_eq!(
        r.check(&anon(), "add_note", &json!({"title": "x"}))
            .unwrap_err()
            .code(),
        ErrorCode::CapabilityRequired
    );
}

/// A tool implemented by hand, whose future borrows the tool (as an `async fn` in an `impl
/// Tool` does): it has no detached body, so the gate holds the tool for it.
struct Tally {
    runs: AtomicUsize,
}

impl Tool for Tally {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "tally",
            "counts its runs",
            json!({"type": "object", "properties": {
                "yields": {"type": "integer", "minimum": 0},
                "hold": {"type": "boolean"}
            }}),
            ToolKind::Read,
        )
    }

    fn call<'t, 'f>(
        &'t self,
        args: Value,
        _ctx: ToolContext,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<ToolOutput, ToolError>> + Send + 'f>,
    >
    where
        't: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            for _ in 0..args["yields"].as_u64().unwrap_or(0) {
                tokio::task::yield_now().await;
            }
            if args["hold"] == json!(true) {
                std::future::pending::<()>().await;
            }
            let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(ToolOutput::text(n.to_string()))
        })
    }
}

#[tokio::test]
async fn a_tool_implemented_by_hand_runs_at_once_or_after_waiting() {
    let r = ToolRegistry::new();
    r.register(Tally {
        runs: AtomicUsize::new(0),
    })
    .unwrap();
    let a = anon();
    let out = call(&r, &a, "tally", json!({})).await.unwrap();
    assert_eq!(out.all_text(), "1");
    let out = call(&r, &a, "tally", json!({"yields": 3})).await.unwrap();
    assert_eq!(out.all_text(), "2");
    // Dropped while it waits (its future still holds the tool): nothing runs, nothing leaks
    // into the next call.
    let mut pending = Box::pin(r.call(&a, "tally", json!({"hold": true}), CallOptions::default()));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        std::future::Future::poll(pending.as_mut(), &mut cx).is_pending(),
        "the tool waits"
    );
    drop(pending);
    let out = call(&r, &a, "tally", json!({})).await.unwrap();
    assert_eq!(out.all_text(), "3");
}

/// A call whose every array item is wrong is refused with a bounded list: one request of a few
/// megabytes used to become millions of field errors (and as many sentences, twice over in the
/// refusal), gigabytes for one call.
#[tokio::test]
async fn invalid_arguments_are_listed_within_a_bound() {
    let r = ToolRegistry::new();
    r.register(ToolBuilder::new("tag").raw_handler(
        json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}),
        |_, _| async { Ok(ToolOutput::default()) },
    ))
    .unwrap();
    let tags: Vec<Value> = (0..1_000).map(|_| json!(1)).collect();
    let e = call(&r, &anon(), "tag", json!({"tags": tags}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    let GateError::InvalidArguments { errors, .. } = &e else {
        panic!("wrong variant {e:?}")
    };
    assert_eq!(errors.len(), MAX_FIELD_ERRORS, "{}", errors.len());
    assert_eq!(errors[0].pointer, "/tags/0");
    let text = e.to_string();
    assert!(text.contains("more"), "{text}");
    assert!(text.len() < 16 * 1024, "{}", text.len());
}

/// A whole number written with a fraction (`2.0`, as small models often write integers) is an
/// integer to JSON Schema, so the gate lets it through; the typed tool then read it as an
/// integer field too. Before, serde refused the float and the call answered `tool_failed`
/// ("the arguments could not be read"), a failure the caller could not tell how to fix.
#[tokio::test]
async fn a_whole_number_with_a_fraction_reaches_a_typed_tool() {
    let r = ToolRegistry::new();
    #[derive(Deserialize, JsonSchema)]
    struct Page {
        n: u8,
        size: Option<i64>,
        scale: Option<f64>,
    }
    r.register(ToolBuilder::new("page").handler(|a: Page, _| async move {
        Ok(ToolOutput::text(format!(
            "{} {:?} {:?}",
            a.n, a.size, a.scale
        )))
    }))
    .unwrap();
    let out = call(
        &r,
        &anon(),
        "page",
        json!({"n": 2.0, "size": -3.0, "scale": 2.0}),
    )
    .await
    .unwrap();
    assert_eq!(out.all_text(), "2 Some(-3) Some(2.0)");
    // A fraction that is not whole is still refused by the schema.
    let e = call(&r, &anon(), "page", json!({"n": 2.5}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
}
