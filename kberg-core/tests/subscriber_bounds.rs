//! What one `Subscriber` may cost the registry, whatever its client does: updates of a URI
//! wait at most once however often it changes (a reader that stalled holds one per URI, not
//! one per change), removals are still delivered, and it holds at most its limit of
//! subscriptions.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kberg_core::*;

/// A registry with one plain resource and a template that matches every `notes://{id}`.
fn registry() -> ResourceRegistry {
    let r = ResourceRegistry::new();
    r.register_text(ResourceDescriptor::new("plain://a", "a"), "A")
        .unwrap();
    r.register_template(
        ResourceTemplate::new("notes://{id}", "note"),
        reader_fn(|uri, _| async move { Ok(vec![ResourceContents::text(uri, None, "a note")]) }),
    )
    .unwrap();
    r
}

fn updated(uri: &str) -> Option<ResourceEvent> {
    Some(ResourceEvent::Updated { uri: uri.into() })
}

fn removed(uri: &str) -> Option<ResourceEvent> {
    Some(ResourceEvent::Removed { uri: uri.into() })
}

#[tokio::test]
async fn updates_of_a_uri_nobody_reads_wait_once() {
    let r = registry();
    let mut sub = r.subscriber();
    sub.subscribe("notes://1").unwrap();
    for _ in 0..10_000 {
        // Every change still tells the subscriber (its waiting update covers it).
        assert_eq!(r.notify_updated("notes://1"), 1);
    }
    assert_eq!(sub.pending(), 1, "one waiting update, not one per change");
    // A reader that comes back sees one update for the URI, then nothing.
    let first = tokio::time::timeout(Duration::from_secs(20), sub.next())
        .await
        .expect("the waiting update");
    assert_eq!(first, updated("notes://1"));
    assert_eq!(sub.try_next(), None);
    // Read, the next change is queued again.
    assert_eq!(r.notify_updated("notes://1"), 1);
    assert_eq!(sub.try_next(), updated("notes://1"));
    assert_eq!(sub.try_next(), None);
}

#[tokio::test]
async fn coalescing_keeps_the_order_of_uris_and_every_removal() {
    let r = registry();
    let mut sub = r.subscriber();
    sub.subscribe("plain://a").unwrap();
    sub.subscribe("notes://1").unwrap();
    for _ in 0..100 {
        r.notify_updated("plain://a");
        r.notify_updated("notes://1");
    }
    assert!(r.remove("plain://a"));
    // Registered again and subscribed again: its next update is news, not the one waiting
    // from before the removal.
    r.register_text(ResourceDescriptor::new("plain://a", "a"), "A again")
        .unwrap();
    sub.subscribe("plain://a").unwrap();
    assert_eq!(r.notify_updated("plain://a"), 1);
    assert!(r.remove("plain://a"));
    assert_eq!(sub.pending(), 5);
    assert_eq!(sub.try_next(), updated("plain://a"));
    assert_eq!(sub.try_next(), updated("notes://1"));
    assert_eq!(sub.try_next(), removed("plain://a"));
    assert_eq!(sub.try_next(), updated("plain://a"));
    assert_eq!(sub.try_next(), removed("plain://a"));
    assert_eq!(sub.try_next(), None);
    // A waiting reader is woken by an update.
    let woken = tokio::spawn(async move {
        let event = sub.next().await;
        (event, sub)
    });
    // Whether the reader is already waiting or not, it sees the update.
    assert_eq!(r.notify_updated("notes://1"), 1);
    let (event, _sub) = tokio::time::timeout(Duration::from_secs(20), woken)
        .await
        .expect("the reader woke")
        .unwrap();
    assert_eq!(event, updated("notes://1"));
}

#[test]
fn a_subscriber_holds_at_most_its_limit() {
    let r = registry();
    let sub = r.subscriber().with_limit(3);
    assert_eq!(sub.limit(), 3);
    for i in 0..3 {
        sub.subscribe(&format!("notes://{i}")).unwrap();
    }
    let err = sub.subscribe("notes://3").unwrap_err();
    assert_eq!(
        err,
        ResourceError::TooManySubscriptions {
            uri: "notes://3".into(),
            limit: 3
        }
    );
    assert!(err.to_string().contains("at most 3"), "{err}");
    assert_eq!(r.subscriber_count("notes://3"), 0, "nothing subscribed");
    // At the limit, subscribing again to a URI it holds is still fine (twice is once).
    sub.subscribe("notes://0").unwrap();
    // Unsubscribing makes room; so does a removal, which ends the subscription.
    assert!(sub.unsubscribe("notes://0"));
    sub.subscribe("notes://3").unwrap();
    assert!(sub.subscribe("plain://a").is_err());
    // Other subscribers have limits of their own.
    let other = r.subscriber().with_limit(1);
    other.subscribe("plain://a").unwrap();
    assert!(other.subscribe("notes://9").is_err());
    drop(other);
    assert!(sub.unsubscribe("notes://1"));
    sub.subscribe("plain://a").unwrap();
    assert!(r.remove("plain://a"));
    sub.subscribe("notes://4").unwrap();
    assert!(sub.subscribe("notes://5").is_err());
    let mut held = r.subscribed_uris();
    held.sort();
    assert_eq!(held, ["notes://2", "notes://3", "notes://4"]);
}

#[test]
fn the_default_limit_is_a_thousand() {
    let r = registry();
    let sub = r.subscriber_for(Caller::new(Principal::new("someone")));
    assert_eq!(sub.limit(), Subscriber::DEFAULT_LIMIT);
    assert_eq!(Subscriber::DEFAULT_LIMIT, 1000);
    for i in 0..1000 {
        sub.subscribe(&format!("notes://{i}")).unwrap();
    }
    assert!(matches!(
        sub.subscribe("notes://1000"),
        Err(ResourceError::TooManySubscriptions { limit: 1000, .. })
    ));
    assert_eq!(r.subscribed_uris().len(), 1000);
    // A zero limit refuses every subscription.
    assert!(r.subscriber().with_limit(0).subscribe("plain://a").is_err());
}
