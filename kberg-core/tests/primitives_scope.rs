//! Scope through the gate: the current scope is filled in when the model leaves it out, the
//! Compact projection hides the argument, and unknown, forbidden or missing scopes are refused
//! with stable codes before the tool runs.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::{Arc, Mutex};

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Find {
    /// Where to search.
    scope: Scope,
    /// What to search for.
    query: String,
}

type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

fn app() -> (ToolRegistry, Seen) {
    let tools = ToolRegistry::new();
    for (name, d) in [
        ("library", "The whole library"),
        ("book:moby", "Moby-Dick"),
        ("book:secret", "A private book"),
    ] {
        tools.declare_scope(ScopeSpec::new(name, d)).unwrap();
    }
    let seen: Seen = Arc::default();
    let s = Arc::clone(&seen);
    tools
        .register(
            ToolBuilder::new("find")
                .description("Search in a scope")
                .small_model_safe()
                .handler(move |a: Find, ctx| {
                    let s = Arc::clone(&s);
                    async move {
                        s.lock()
                            .unwrap()
                            .push((a.scope.to_string(), ctx.scope().map(str::to_string)));
                        Ok(ToolOutput::text(format!(
                            "searched {} for {}",
                            a.scope.as_str(),
                            a.query
                        )))
                    }
                }),
        )
        .unwrap();
    // A hand-written schema names its scope field.
    tools
        .register(
            ToolBuilder::new("count")
                .small_model_safe()
                .scope_field("where")
                .raw_handler(
                    json!({"type": "object", "properties": {"where": {"type": "string"}},
                           "required": ["where"], "additionalProperties": false}),
                    |a, ctx| async move {
                        Ok(ToolOutput::text(format!(
                            "{} {}",
                            a["where"].as_str().unwrap_or("?"),
                            ctx.scope().unwrap_or("?")
                        )))
                    },
                ),
        )
        .unwrap();
    (tools, seen)
}

fn reader() -> Caller {
    Caller::new(Principal::new("ann"))
        .with_scopes(ScopeSet::only(["library", "book:moby"]).with_current("book:moby"))
}

async fn find(tools: &ToolRegistry, who: &Caller, args: Value) -> Result<ToolOutput, GateError> {
    tools.call(who, "find", args, CallOptions::default()).await
}

#[tokio::test]
async fn the_current_scope_is_filled_in() {
    let (tools, seen) = app();
    let out = find(&tools, &reader(), json!({"query": "whale"}))
        .await
        .unwrap();
    assert_eq!(out.all_text(), "searched book:moby for whale");
    // An explicit null is the same as leaving it out.
    find(&tools, &reader(), json!({"query": "ahab", "scope": null}))
        .await
        .unwrap();
    // Naming another allowed scope works.
    let out = find(&tools, &reader(), json!({"query": "x", "scope": "library"}))
        .await
        .unwrap();
    assert_eq!(out.all_text(), "searched library for x");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        &[
            ("book:moby".to_string(), Some("book:moby".to_string())),
            ("book:moby".to_string(), Some("book:moby".to_string())),
            ("library".to_string(), Some("library".to_string())),
        ]
    );
    let out = tools
        .call(&reader(), "count", json!({}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(out.all_text(), "book:moby book:moby");
}

#[tokio::test]
async fn bad_scopes_are_refused_before_the_tool_runs() {
    let (tools, seen) = app();
    let e = find(
        &tools,
        &reader(),
        json!({"query": "x", "scope": "book:secret"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeForbidden);
    assert_eq!(e.details()["scope"], "book:secret");
    assert!(!e.code().is_retryable());
    let e = find(
        &tools,
        &reader(),
        json!({"query": "x", "scope": "book:nope"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeUnknown);
    // No current scope and none given.
    let lost = Caller::new(Principal::new("ann")).with_scopes(ScopeSet::only(["library"]));
    let e = find(&tools, &lost, json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeRequired);
    assert_eq!(e.details()["field"], "scope");
    // A current scope the caller may not use is refused like a named one.
    let sneaky = Caller::new(Principal::new("ann"))
        .with_scopes(ScopeSet::only(["library"]).with_current("book:secret"));
    let e = find(&tools, &sneaky, json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeForbidden);
    // The default caller may use no scope at all.
    let plain = Caller::new(Principal::new("ann")).with_current_scope("library");
    let e = find(&tools, &plain, json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeForbidden);
    // A scope of the wrong type is an argument error.
    let e = find(&tools, &reader(), json!({"query": "x", "scope": 7}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArguments);
    assert!(seen.lock().unwrap().is_empty());
    // `check` applies the same rules.
    assert_eq!(
        tools
            .check(
                &reader(),
                "find",
                &json!({"query": "x", "scope": "book:secret"})
            )
            .unwrap_err()
            .code(),
        ErrorCode::ScopeForbidden
    );
    assert!(
        tools
            .check(&reader(), "find", &json!({"query": "x"}))
            .is_ok()
    );
}

#[tokio::test]
async fn removed_scopes_become_unknown() {
    let (tools, _) = app();
    assert!(tools.remove_scope("book:moby"));
    assert!(!tools.remove_scope("book:moby"));
    let e = find(&tools, &reader(), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeUnknown);
    assert_eq!(
        tools
            .scopes()
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["book:secret", "library"]
    );
}

#[test]
fn projected_schemas_hide_or_relax_the_scope() {
    let (tools, _) = app();
    let compact = reader().narrowed(&Grants::none(), SurfaceProjection::Compact);
    for spec in tools.list(&compact) {
        let props = spec.input_schema["properties"].as_object().unwrap();
        let field = spec.scope_field.clone().unwrap();
        assert!(!props.contains_key(&field), "{} shows {field}", spec.name);
        let required = spec.input_schema["required"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!required.contains(&json!(field)));
    }
    for spec in tools.list(&reader()) {
        let field = spec.scope_field.clone().unwrap();
        assert!(spec.input_schema["properties"].get(&field).is_some());
        let required = spec.input_schema["required"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!required.contains(&json!(field)));
    }
    // The app's own spec keeps the schema as written, and records the detected field.
    let own = tools.spec("find").unwrap();
    assert_eq!(own.scope_field.as_deref(), Some("scope"));
    assert!(
        own.input_schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("scope"))
    );
    assert_eq!(
        own.input_schema["properties"]["scope"][SCOPE_SCHEMA_KEYWORD],
        true
    );
}

#[test]
fn scope_declarations_are_checked() {
    let (tools, _) = app();
    assert!(matches!(
        tools.declare_scope(ScopeSpec::new("library", "again")),
        Err(CoreError::Duplicate { .. })
    ));
    for bad in ["", "has space", "tab\there"] {
        assert!(matches!(
            tools.declare_scope(ScopeSpec::new(bad, "x")),
            Err(CoreError::InvalidName { .. })
        ));
    }
    assert!(
        tools
            .declare_scope(ScopeSpec::new("x".repeat(129), "x"))
            .is_err()
    );
    // A scope field that is not in the schema is a registration error.
    let err = tools
        .register(ToolBuilder::new("bad").scope_field("where").raw_handler(
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            |_a, _c| async { Ok(ToolOutput::default()) },
        ))
        .unwrap_err();
    assert!(matches!(err, CoreError::InvalidSchema { .. }), "{err}");
}

#[tokio::test]
async fn sessions_narrow_scopes() {
    let (tools, _) = app();
    let session = reader().narrowed_scopes(&ScopeSet::only(["library"]));
    assert_eq!(session.scopes().current(), None);
    let e = find(
        &tools,
        &session,
        json!({"query": "x", "scope": "book:moby"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeForbidden);
    let session = reader().narrowed_scopes(&ScopeSet::any().with_current("library"));
    let out = find(&tools, &session, json!({"query": "x"})).await.unwrap();
    assert_eq!(out.all_text(), "searched library for x");
}

/// An unknown scope is quoted back in the refusal: a scope of megabytes came back whole in its
/// message and details. It is cut short (marked `...`) and the code stays `scope_unknown`.
#[tokio::test]
async fn a_long_unknown_scope_is_quoted_cut_short() {
    let (tools, _) = app();
    let long = format!("book:{}", "ö".repeat(20_000));
    let e = find(&tools, &reader(), json!({"query": "x", "scope": long}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ScopeUnknown);
    let message = e.to_string();
    assert!(message.len() < 1_024, "{} bytes", message.len());
    let quoted = e.details()["scope"].as_str().unwrap().to_string();
    assert!(quoted.len() < 1_024, "{} bytes", quoted.len());
    assert!(
        quoted.starts_with("book:ö") && quoted.ends_with("..."),
        "{quoted}"
    );
}

#[tokio::test]
async fn a_scope_that_is_not_a_string_is_refused() {
    // A hand-written schema that leaves the scope field's type open.
    let (tools, _) = app();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&ran);
    tools
        .register(
            ToolBuilder::new("open_where")
                .small_model_safe()
                .scope_field("where")
                .raw_handler(
                    json!({"type": "object", "properties": {"where": {"description": "Where"}}}),
                    move |a, ctx| {
                        let r = Arc::clone(&r);
                        async move {
                            r.lock()
                                .unwrap()
                                .push((a["where"].clone(), ctx.scope().map(str::to_string)));
                            Ok(ToolOutput::text("ran"))
                        }
                    },
                ),
        )
        .unwrap();
    for bad in [
        json!(["book:secret"]),
        json!(7),
        json!({"name": "book:secret"}),
    ] {
        let e = tools
            .call(
                &reader(),
                "open_where",
                json!({"where": bad}),
                CallOptions::default(),
            )
            .await
            .unwrap_err();
        let GateError::InvalidArguments { errors, .. } = &e else {
            panic!("{bad}: {e:?}");
        };
        assert_eq!(errors[0].pointer, "/where");
    }
    assert!(ran.lock().unwrap().is_empty(), "{:?}", ran.lock().unwrap());
    // A string is checked as ever.
    tools
        .call(
            &reader(),
            "open_where",
            json!({"where": "library"}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        *ran.lock().unwrap(),
        [(json!("library"), Some("library".to_string()))]
    );
}

#[tokio::test]
async fn a_scoped_tool_s_arguments_that_are_not_an_object_are_refused() {
    // A hand-written schema that does not say the arguments are an object.
    let (tools, _) = app();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&ran);
    tools
        .register(
            ToolBuilder::new("loose")
                .small_model_safe()
                .scope_field("where")
                .raw_handler(
                    json!({"properties": {"where": {"type": "string"}}}),
                    move |a, ctx| {
                        let r = Arc::clone(&r);
                        async move {
                            r.lock().unwrap().push((a, ctx.scope().map(str::to_string)));
                            Ok(ToolOutput::text("ran"))
                        }
                    },
                ),
        )
        .unwrap();
    for bad in [json!("book:secret"), json!(["book:secret"]), json!(7)] {
        let e = tools
            .call(&reader(), "loose", bad.clone(), CallOptions::default())
            .await
            .unwrap_err();
        let GateError::InvalidArguments { errors, .. } = &e else {
            panic!("{bad}: {e:?}");
        };
        assert_eq!(errors[0].pointer, "");
    }
    assert!(ran.lock().unwrap().is_empty(), "{:?}", ran.lock().unwrap());
    // Absent arguments are an empty object, and get the current scope.
    tools
        .call(&reader(), "loose", Value::Null, CallOptions::default())
        .await
        .unwrap();
    assert_eq!(
        *ran.lock().unwrap(),
        [(json!({"where": "book:moby"}), Some("book:moby".to_string()))]
    );
}
