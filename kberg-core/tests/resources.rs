//! ResourceRegistry and PromptRegistry through the public API: listing, reading, templates,
//! subscriptions that reach exactly their subscribers, removal, and the failure paths.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use kberg_core::*;

fn registry() -> ResourceRegistry {
    let r = ResourceRegistry::new();
    r.register_text(
        ResourceDescriptor::new("notes://inbox", "inbox").mime_type("text/plain"),
        "three notes",
    )
    .unwrap();
    r.register(
        ResourceDescriptor::new("notes://logo", "logo").mime_type("image/png"),
        reader_fn(|uri, _| async move {
            Ok(vec![ResourceContents::blob(
                uri,
                Some("image/png"),
                vec![0x89, b'P', b'N', b'G'],
            )])
        }),
    )
    .unwrap();
    r.register_template(
        ResourceTemplate::new("notes://note/{id}", "note").mime_type("text/markdown"),
        reader_fn(|uri, vars| async move {
            let id = vars.get("id").cloned().unwrap_or_default();
            if id == "missing" {
                return Err(ResourceError::NotFound { uri });
            }
            Ok(vec![ResourceContents::text(
                uri,
                Some("text/markdown"),
                format!("# note {id}"),
            )])
        }),
    )
    .unwrap();
    r
}

#[tokio::test]
async fn read_text_binary_and_template() {
    let r = registry();
    let c = r.read("notes://inbox").await.unwrap();
    assert_eq!(c[0].body, ResourceBody::Text("three notes".into()));
    assert_eq!(c[0].mime_type.as_deref(), Some("text/plain"));
    let c = r.read("notes://logo").await.unwrap();
    assert_eq!(c[0].body, ResourceBody::Blob(vec![0x89, b'P', b'N', b'G']));
    let c = r.read("notes://note/42").await.unwrap();
    assert_eq!(c[0].body, ResourceBody::Text("# note 42".into()));
    assert_eq!(c[0].uri, "notes://note/42");
}

#[tokio::test]
async fn unknown_uri_is_not_found() {
    let r = registry();
    for uri in [
        "notes://nothing",
        "notes://note/a/b",
        "",
        "notes://note/missing",
    ] {
        let e = r.read(uri).await.unwrap_err();
        assert!(matches!(e, ResourceError::NotFound { .. }), "{uri}: {e}");
    }
}

#[test]
fn duplicates_and_bad_templates() {
    let r = registry();
    assert!(matches!(
        r.register_text(ResourceDescriptor::new("notes://inbox", "again"), "x"),
        Err(CoreError::Duplicate { .. })
    ));
    assert!(matches!(
        r.register_template(
            ResourceTemplate::new("notes://note/{id}", "again"),
            reader_fn(|_, _| async { Ok(vec![]) })
        ),
        Err(CoreError::Duplicate { .. })
    ));
    assert!(matches!(
        r.register_template(
            ResourceTemplate::new("x://{unclosed", "bad"),
            reader_fn(|_, _| async { Ok(vec![]) })
        ),
        Err(CoreError::InvalidTemplate { .. })
    ));
    assert!(
        r.register_text(ResourceDescriptor::new("", "empty"), "x")
            .is_err()
    );
}

#[test]
fn list_is_paginated_and_sorted() {
    let r = ResourceRegistry::new();
    for i in 0..23 {
        r.register_text(
            ResourceDescriptor::new(format!("r://{i:03}"), format!("r{i}")),
            "x",
        )
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let p = r.list(cursor.as_deref(), 5).unwrap();
        seen.extend(p.items.into_iter().map(|d| d.uri));
        match p.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 23);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        r.list(Some("not-a-cursor"), 5).unwrap_err(),
        ResourceError::InvalidCursor
    );
    assert_eq!(registry().list_templates(None, 10).unwrap().items.len(), 1);
}

#[tokio::test]
async fn notify_reaches_exactly_the_subscribers() {
    let r = registry();
    let mut a = r.subscriber();
    let mut b = r.subscriber();
    let mut c = r.subscriber();
    a.subscribe("notes://inbox").unwrap();
    b.subscribe("notes://inbox").unwrap();
    b.subscribe("notes://inbox").unwrap(); // twice is once
    c.subscribe("notes://note/7").unwrap(); // template URIs can be watched too
    assert_eq!(r.subscriber_count("notes://inbox"), 2);

    assert_eq!(r.notify_updated("notes://inbox"), 2);
    assert_eq!(
        a.try_next(),
        Some(ResourceEvent::Updated {
            uri: "notes://inbox".into()
        })
    );
    assert_eq!(
        b.try_next(),
        Some(ResourceEvent::Updated {
            uri: "notes://inbox".into()
        })
    );
    assert_eq!(b.try_next(), None, "one update, delivered once");
    assert_eq!(c.try_next(), None);

    // Nobody watches this one: nothing is delivered, nothing fails.
    assert_eq!(r.notify_updated("notes://logo"), 0);
    assert_eq!(r.notify_updated("notes://never-registered"), 0);

    assert!(b.unsubscribe("notes://inbox"));
    assert!(!b.unsubscribe("notes://inbox"));
    assert_eq!(r.notify_updated("notes://inbox"), 1);
    assert!(b.try_next().is_none());
    assert!(a.next().await.is_some());
}

#[test]
fn subscribe_to_unknown_uri_is_refused() {
    let r = registry();
    let s = r.subscriber();
    assert!(matches!(
        s.subscribe("notes://nope"),
        Err(ResourceError::NotFound { .. })
    ));
}

#[test]
fn subscriptions_end_with_their_subscriber() {
    let r = registry();
    let s = r.subscriber();
    s.subscribe("notes://inbox").unwrap();
    assert_eq!(r.subscriber_count("notes://inbox"), 1);
    drop(s);
    assert_eq!(r.subscriber_count("notes://inbox"), 0);
    assert_eq!(r.notify_updated("notes://inbox"), 0);
}

#[test]
fn removing_a_resource_tells_subscribers_and_changes_the_list() {
    let r = registry();
    let mut changes = r.changes();
    changes.mark_unchanged();
    let mut s = r.subscriber();
    s.subscribe("notes://inbox").unwrap();
    assert!(r.remove("notes://inbox"));
    assert!(changes.has_changed().unwrap());
    assert_eq!(
        s.try_next(),
        Some(ResourceEvent::Removed {
            uri: "notes://inbox".into()
        })
    );
    assert_eq!(r.subscriber_count("notes://inbox"), 0);
    assert!(!r.remove("notes://inbox"));
    assert!(r.remove_template("notes://note/{id}"));
    assert!(!r.exists("notes://note/1"));
}

/// An edit publishes its changes together with one version step; a failed edit publishes
/// nothing; a resource removed and registered again in one edit keeps its subscribers, one
/// only removed tells them once the edit is published.
#[test]
fn a_resource_edit_is_published_whole_or_not_at_all() {
    let r = registry();
    let mut changes = r.changes();
    let before = *changes.borrow_and_update();
    let mut inbox = r.subscriber();
    inbox.subscribe("notes://inbox").unwrap();
    let mut logo = r.subscriber();
    logo.subscribe("notes://logo").unwrap();
    let reader =
        || reader_fn(|uri, _| async move { Ok(vec![ResourceContents::text(uri, None, "x")]) });
    r.edit(|e| {
        assert!(e.remove("notes://inbox"));
        assert!(e.remove("notes://logo"));
        assert!(!e.remove("notes://logo"));
        e.register(
            ResourceDescriptor::new("notes://inbox", "inbox again"),
            reader(),
        )?;
        e.register(ResourceDescriptor::new("notes://a", "a"), reader())?;
        assert!(e.remove_template("notes://note/{id}"));
        e.register_template(ResourceTemplate::new("notes://n/{id}", "n"), reader())
    })
    .unwrap();
    assert_eq!(*changes.borrow_and_update(), before + 1, "one version step");
    let uris: Vec<String> = r
        .list(None, 10)
        .unwrap()
        .items
        .into_iter()
        .map(|d| d.uri)
        .collect();
    assert_eq!(uris, ["notes://a", "notes://inbox"]);
    assert!(r.exists("notes://n/1") && !r.exists("notes://note/1"));
    assert_eq!(inbox.try_next(), None, "registered again: not removed");
    assert_eq!(r.subscriber_count("notes://inbox"), 1);
    assert_eq!(
        logo.try_next(),
        Some(ResourceEvent::Removed {
            uri: "notes://logo".into()
        })
    );
    // A failed edit leaves everything as it was.
    let err = r
        .edit(|e| {
            assert!(e.remove("notes://a"));
            e.register(ResourceDescriptor::new("notes://inbox", "taken"), reader())
        })
        .unwrap_err();
    assert!(matches!(err, CoreError::Duplicate { .. }), "{err}");
    assert!(r.exists("notes://a"));
    assert!(!changes.has_changed().unwrap());
    // An edit that changes nothing moves no version.
    r.edit(|e| Ok::<_, CoreError>(e.remove("notes://nope")))
        .unwrap();
    assert!(!changes.has_changed().unwrap());
}

/// Prompts: several changes in one edit, one version step; a failed edit changes nothing.
#[test]
fn a_prompt_edit_is_published_whole_or_not_at_all() {
    let p = PromptRegistry::new();
    let hello = |_args| async {
        Ok(PromptResult {
            description: None,
            messages: vec![PromptMessage::user("hello")],
        })
    };
    p.register(PromptSpec::new("old", "Old"), hello).unwrap();
    let mut changes = p.changes();
    let before = *changes.borrow_and_update();
    p.edit(|e| {
        assert!(e.remove("old"));
        assert!(e.spec("old").is_none());
        e.register(PromptSpec::new("a", "A"), hello)?;
        e.register(PromptSpec::new("b", "B"), hello)
    })
    .unwrap();
    assert_eq!(*changes.borrow_and_update(), before + 1);
    let names: Vec<String> = p.list().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["a", "b"]);
    let err = p
        .edit(|e| {
            e.remove("a");
            e.register(PromptSpec::new("b", "again"), hello)
        })
        .unwrap_err();
    assert!(matches!(err, CoreError::Duplicate { .. }), "{err}");
    assert_eq!(p.list().len(), 2);
    assert!(!changes.has_changed().unwrap());
}

#[tokio::test]
async fn prompts_check_their_arguments() {
    let p = PromptRegistry::new();
    p.register(
        PromptSpec::new("summarize", "Summarize a note")
            .argument(
                PromptArgument::required("note", "The note id")
                    .with_completions(["inbox", "ideas", "invoices"]),
            )
            .argument(PromptArgument::optional("style", "bullet or prose")),
        |args| async move {
            Ok(PromptResult {
                description: None,
                messages: vec![PromptMessage::user(format!(
                    "Summarize {} as {}",
                    args["note"],
                    args.get("style").map_or("prose", String::as_str)
                ))],
            })
        },
    )
    .unwrap();
    let mut args = BTreeMap::new();
    args.insert("note".to_string(), "inbox".to_string());
    let r = p.get("summarize", args.clone()).await.unwrap();
    assert_eq!(
        r.messages[0].content,
        Content::text("Summarize inbox as prose")
    );

    let e = p.get("summarize", BTreeMap::new()).await.unwrap_err();
    assert_eq!(
        e,
        PromptError::MissingArgument {
            prompt: "summarize".into(),
            argument: "note".into()
        }
    );
    args.insert("colour".into(), "red".into());
    assert!(matches!(
        p.get("summarize", args).await,
        Err(PromptError::UnknownArgument { .. })
    ));
    assert!(matches!(
        p.get("nope", BTreeMap::new()).await,
        Err(PromptError::UnknownPrompt { .. })
    ));

    assert_eq!(
        p.complete("summarize", "note", "IN").unwrap(),
        ["inbox", "invoices"]
    );
    assert!(p.complete("summarize", "style", "").unwrap().is_empty());
    assert!(p.complete("summarize", "zzz", "").is_err());
    assert_eq!(p.list().len(), 1);
    assert!(matches!(
        p.register(PromptSpec::new("summarize", "again"), |_| async {
            Err("x".into())
        }),
        Err(CoreError::Duplicate { .. })
    ));
}

/// A reader or a prompt that panics is answered as a failure, as a panicking tool is, and the
/// panic's words (which may quote anything the code held) are not in it. Before, the panic
/// went up through the read: on the wire the request was never answered.
#[tokio::test]
async fn a_panicking_reader_or_prompt_fails_without_its_words() {
    let r = ResourceRegistry::new();
    r.register(
        ResourceDescriptor::new("notes://boom", "boom"),
        reader_fn(|_, _| async move {
            if true {
                panic!("secret-db-password");
            }
            Ok(vec![])
        }),
    )
    .unwrap();
    r.register_template(
        ResourceTemplate::new("notes://eager/{id}", "eager"),
        reader_fn(|_, _| {
            if true {
                panic!("secret-before-the-future");
            }
            async { Ok(vec![]) }
        }),
    )
    .unwrap();
    for uri in ["notes://boom", "notes://eager/1"] {
        let e = r.read(uri).await.unwrap_err();
        let ResourceError::ReadFailed {
            uri: failed,
            message,
        } = &e
        else {
            panic!("wrong error {e:?}")
        };
        assert_eq!(failed, uri);
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(message.contains("internal error"), "{message}");
    }

    let p = PromptRegistry::new();
    p.register(
        PromptSpec::new("boom", "panics while rendering"),
        |_| async {
            if true {
                panic!("secret-api-key");
            }
            Ok(PromptResult {
                description: None,
                messages: vec![],
            })
        },
    )
    .unwrap();
    p.register(PromptSpec::new("eager", "panics before rendering"), |_| {
        if true {
            panic!("secret-api-key");
        }
        async {
            Ok(PromptResult {
                description: None,
                messages: vec![],
            })
        }
    })
    .unwrap();
    for name in ["boom", "eager"] {
        let e = p.get(name, BTreeMap::new()).await.unwrap_err();
        assert!(
            matches!(&e, PromptError::Failed { prompt, .. } if prompt == name),
            "{e:?}"
        );
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
