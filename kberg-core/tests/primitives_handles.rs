//! Handles through the gate: minted in results, resolved before the tool runs, and every bad
//! handle (forged, altered, expired, another principal's, another app's, another kind's)
//! refused with a stable code and a pointer to the argument, without running the tool.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

struct Note;
impl HandleKind for Note {
    const KIND: &'static str = "note";
}

struct Book;
impl HandleKind for Book {
    const KIND: &'static str = "book";
}

#[derive(Deserialize, JsonSchema)]
struct Open {
    note: Handle<Note>,
    /// Optional second note.
    #[serde(default)]
    also: Option<Handle<Note>>,
    /// Books to file it under.
    #[serde(default)]
    books: Vec<Handle<Book>>,
}

const SECRET: [u8; 32] = [42u8; 32];

struct App {
    tools: ToolRegistry,
    runs: Arc<AtomicUsize>,
}

fn app_with(codec: Option<HandleCodec>) -> App {
    let mut builder = ToolRegistry::builder();
    if let Some(c) = codec {
        builder = builder.handle_codec(c);
    }
    let tools = builder.build();
    tools
        .register(
            ToolBuilder::new("list_notes")
                .description("List notes")
                .handler(|_a: serde_json::Map<String, Value>, ctx| async move {
                    let a = ctx
                        .mint_handle::<Note>("notes/row-1")
                        .map_err(|e| e.to_string())?;
                    let b = ctx
                        .mint_handle::<Note>("notes/row-2")
                        .map_err(|e| e.to_string())?;
                    // A time to live past what the clock holds: minted, and never expires.
                    let book = ctx
                        .mint_handle_of("book", "books/7", Some(std::time::Duration::MAX))
                        .map_err(|e| e.to_string())?;
                    ToolOutput::json(&json!({"notes": [a, b], "book": book}))
                }),
        )
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    tools
        .register(
            ToolBuilder::new("open_note")
                .description("Open a note")
                .handler(move |a: Open, _ctx| {
                    let r = Arc::clone(&r);
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        let books: Vec<&str> = a.books.iter().map(|b| b.id()).collect();
                        Ok(ToolOutput::text(format!(
                            "{} {} {}",
                            a.note.id(),
                            a.also.as_ref().map_or("-", |h| h.id()),
                            books.join(",")
                        )))
                    }
                }),
        )
        .unwrap();
    App { tools, runs }
}

fn app() -> App {
    app_with(Some(HandleCodec::new("notes-app", &SECRET).unwrap()))
}

fn caller(id: &str) -> Caller {
    Caller::new(Principal::new(id))
}

async fn listed(tools: &ToolRegistry, who: &Caller) -> (Vec<String>, String) {
    let out = tools
        .call(who, "list_notes", json!({}), CallOptions::default())
        .await
        .unwrap();
    let s = out.structured.unwrap();
    let notes = s["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    (notes, s["book"].as_str().unwrap().to_string())
}

async fn open(app: &App, who: &Caller, args: Value) -> Result<ToolOutput, GateError> {
    app.tools
        .call(who, "open_note", args, CallOptions::default())
        .await
}

fn assert_refused(r: Result<ToolOutput, GateError>, code: ErrorCode, pointer: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.details()["pointer"], pointer, "{e}");
    assert!(e.to_output().is_error);
}

#[tokio::test]
async fn handles_round_trip_and_hide_internal_ids() {
    let app = app();
    let ann = caller("ann");
    let out = app
        .tools
        .call(&ann, "list_notes", json!({}), CallOptions::default())
        .await
        .unwrap();
    let text = out.all_text();
    assert!(!text.contains("row-1") && !text.contains("notes/") && !text.contains("books/7"));
    let (notes, book) = listed(&app.tools, &ann).await;
    assert_eq!(notes.len(), 2);
    // Stable: listing again gives the same handles.
    assert_eq!(listed(&app.tools, &ann).await.0, notes);
    let out = open(
        &app,
        &ann,
        json!({"note": notes[0], "also": notes[1], "books": [book]}),
    )
    .await
    .unwrap();
    assert_eq!(out.all_text(), "notes/row-1 notes/row-2 books/7");
    // Optional handle absent or null.
    let out = open(&app, &ann, json!({"note": notes[1], "also": null}))
        .await
        .unwrap();
    assert_eq!(out.all_text(), "notes/row-2 - ");
    assert_eq!(app.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn schema_shows_handles_as_strings() {
    let app = app();
    let spec = app
        .tools
        .list(&caller("ann"))
        .into_iter()
        .find(|s| s.name == "open_note")
        .unwrap();
    let note = &spec.input_schema["properties"]["note"];
    assert_eq!(note["type"], "string");
    assert_eq!(note[HANDLE_SCHEMA_KEYWORD], "note");
    assert_eq!(
        spec.input_schema["properties"]["books"]["items"][HANDLE_SCHEMA_KEYWORD],
        "book"
    );
}

#[tokio::test]
async fn forged_and_altered_handles_are_refused() {
    let app = app();
    let ann = caller("ann");
    let (notes, _) = listed(&app.tools, &ann).await;
    let good = &notes[0];
    // Altered: flip one character in the middle of the payload.
    let mut altered: Vec<char> = good.chars().collect();
    let i = altered.len() / 2;
    altered[i] = if altered[i] == 'A' { 'B' } else { 'A' };
    let altered: String = altered.into_iter().collect();
    let truncated = &good[..good.len() - 2];
    for bad in [
        altered.as_str(),
        truncated,
        "notes/row-1",
        "h1.",
        "h1.!!!not-base64!!!",
        "h1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "",
    ] {
        assert_refused(
            open(&app, &ann, json!({"note": bad})).await,
            ErrorCode::HandleInvalid,
            "/note",
        );
    }
    // A huge string is refused without decoding.
    let huge = format!("h1.{}", "A".repeat(100_000));
    assert_refused(
        open(&app, &ann, json!({"note": huge})).await,
        ErrorCode::HandleInvalid,
        "/note",
    );
    // In an array, the pointer names the element.
    let (_, book) = listed(&app.tools, &ann).await;
    assert_refused(
        open(
            &app,
            &ann,
            json!({"note": good, "books": [book, "h1.zzzz"]}),
        )
        .await,
        ErrorCode::HandleInvalid,
        "/books/1",
    );
    assert_eq!(app.runs.load(Ordering::SeqCst), 0, "no refused call ran");
}

#[tokio::test]
async fn another_principals_app_or_kind_is_refused() {
    let app = app();
    let ann = caller("ann");
    let (notes, book) = listed(&app.tools, &ann).await;
    // Another principal.
    assert_refused(
        open(&app, &caller("bob"), json!({"note": notes[0]})).await,
        ErrorCode::HandleInvalid,
        "/note",
    );
    // Another kind: a book handle where a note is expected.
    assert_refused(
        open(&app, &ann, json!({"note": book})).await,
        ErrorCode::HandleInvalid,
        "/note",
    );
    // Another app: same id, different secret; and same secret, different app id.
    for other in [
        HandleCodec::new("notes-app", &[1u8; 32]).unwrap(),
        HandleCodec::new("mail-app", &SECRET).unwrap(),
    ] {
        let other_app = app_with(Some(other));
        assert_refused(
            open(&other_app, &ann, json!({"note": notes[0]})).await,
            ErrorCode::HandleInvalid,
            "/note",
        );
        assert_eq!(other_app.runs.load(Ordering::SeqCst), 0);
    }
    assert_eq!(app.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn expired_handles_answer_handle_expired() {
    let app = app();
    let ann = caller("ann");
    let codec = app.tools.handle_codec().unwrap();
    let past = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let expired = codec
        .mint("ann", "note", "notes/row-1", Some(past))
        .unwrap();
    assert_refused(
        open(&app, &ann, json!({"note": expired})).await,
        ErrorCode::HandleExpired,
        "/note",
    );
    let e = open(&app, &ann, json!({"note": expired}))
        .await
        .unwrap_err();
    assert!(e.code().is_retryable());
    // An expired handle for another principal is invalid, not expired: no information leaks.
    assert_refused(
        open(&app, &caller("bob"), json!({"note": expired})).await,
        ErrorCode::HandleInvalid,
        "/note",
    );
    // Pushing the expiry forward breaks the tag.
    let fresh = codec
        .mint(
            "ann",
            "note",
            "notes/row-1",
            Some(SystemTime::now() + Duration::from_secs(3600)),
        )
        .unwrap();
    let out = open(&app, &ann, json!({"note": fresh})).await.unwrap();
    assert!(out.all_text().starts_with("notes/row-1"));
    let mut bytes = base64_decode(&expired[3..]);
    bytes[..8].copy_from_slice(&u64::MAX.to_be_bytes());
    let tampered = format!("h1.{}", base64_encode(&bytes));
    assert_refused(
        open(&app, &ann, json!({"note": tampered})).await,
        ErrorCode::HandleInvalid,
        "/note",
    );
    assert_eq!(app.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn handles_survive_a_restart_with_the_same_secret() {
    let first = app();
    let ann = caller("ann");
    let (notes, _) = listed(&first.tools, &ann).await;
    drop(first);
    let second = app();
    let out = open(&second, &ann, json!({"note": notes[0]}))
        .await
        .unwrap();
    assert!(out.all_text().starts_with("notes/row-1"));
    // A codec with a random secret does not accept them.
    let random = app_with(Some(HandleCodec::generate("notes-app").unwrap()));
    assert_refused(
        open(&random, &ann, json!({"note": notes[0]})).await,
        ErrorCode::HandleInvalid,
        "/note",
    );
}

#[tokio::test]
async fn without_a_codec_handle_tools_fail_clearly() {
    let app = app_with(None);
    let ann = caller("ann");
    let e = app
        .tools
        .call(&ann, "list_notes", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(e.to_string().contains("not configured handles"), "{e}");
    let e = open(&app, &ann, json!({"note": "h1.AAAA"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert_eq!(app.runs.load(Ordering::SeqCst), 0);
}

#[test]
fn weak_secrets_are_refused() {
    assert_eq!(
        HandleCodec::new("a", b"short").unwrap_err(),
        HandleError::WeakSecret
    );
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap()
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

#[tokio::test]
async fn a_handle_site_that_is_not_a_string_is_refused() {
    // A hand-written schema that leaves the handle's type open.
    let app = app();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    app.tools
        .register(
            ToolBuilder::new("open_raw")
                .description("Open a note by handle")
                .raw_handler(
                    json!({"type": "object", "properties": {"note": {"x-kberg-handle": "note"}}}),
                    move |a, _ctx| {
                        let s = Arc::clone(&s);
                        async move {
                            s.lock().unwrap().push(a["note"].clone());
                            Ok(ToolOutput::text("opened"))
                        }
                    },
                ),
        )
        .unwrap();
    let ann = caller("ann");
    for raw in [
        json!(7),
        json!(["notes/row-1"]),
        json!({"id": "notes/row-1"}),
        json!(true),
    ] {
        let r = app
            .tools
            .call(
                &ann,
                "open_raw",
                json!({"note": raw}),
                CallOptions::default(),
            )
            .await;
        assert_refused(r, ErrorCode::HandleInvalid, "/note");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    // A handle, and an absent one, as ever.
    let (notes, _) = listed(&app.tools, &ann).await;
    for args in [json!({"note": notes[0]}), json!({"note": null}), json!({})] {
        app.tools
            .call(&ann, "open_raw", args, CallOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [json!("notes/row-1"), Value::Null, Value::Null]
    );
}
