//! One principal's share of the listen streams, over real HTTP: a principal cannot take every
//! one of `max_listen_streams` (GET SSE and `subscriptions/listen` together) and so starve
//! every other client of its server-to-client notifications. A stream past its share gets
//! `503` with the code `too_many_streams_for_principal`, while another principal still gets
//! one; closing a stream gives its place back.

mod common;

use common::*;
use kberg_server::Limits;

/// Opens a listen stream as `token` that must be refused; the refusal's status and body. A
/// stream let through would never end: the deadline turns that into a failure.
async fn refused_listen(url: &str, token: &str) -> (u16, String) {
    tokio::time::timeout(kberg_testkit::WAIT, async {
        let r = listen_response(url, token, &[]).await;
        let status = r.status().as_u16();
        (status, r.text().await.unwrap_or_default())
    })
    .await
    .expect("a listen stream was opened past the principal's share")
}

#[tokio::test]
async fn one_principal_cannot_take_every_listen_stream() {
    // A quarter of 4: one stream per principal by default.
    let s = start_with(Limits::default().max_listen_streams(4)).await;
    let reader = Raw::new(&s.url, Some(READER));
    let sid = reader.initialize().await;
    let first = reader.open_get(&sid).await;
    assert_eq!(first.status().as_u16(), 200);

    // The reader's next stream, of either kind, is past its share.
    let (status, text) = refused_listen(&s.url, READER).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("too_many_streams_for_principal"), "{text}");
    let other = reader.initialize().await;
    let get = tokio::time::timeout(kberg_testkit::WAIT, async {
        let r = reader.open_get(&other).await;
        let status = r.status().as_u16();
        (status, r.text().await.unwrap_or_default())
    })
    .await
    .expect("a GET stream was opened past the principal's share");
    assert_eq!(get.0, 503, "{}", get.1);
    assert!(
        get.1.contains("too_many_streams_for_principal"),
        "{}",
        get.1
    );

    // Another principal still gets one.
    let writers = listen_response(&s.url, WRITER, &[]).await;
    assert_eq!(writers.status().as_u16(), 200);

    // Closing the reader's stream gives its place back (the server notices the disconnect).
    drop(first);
    let _reopened = kberg_testkit::eventually_async_ok("the slot to be returned", || async {
        let r = listen_response(&s.url, READER, &[]).await;
        match r.status().as_u16() {
            200 => Ok(r),
            status => Err(status),
        }
    })
    .await;
}

#[tokio::test]
async fn the_listen_share_is_configurable_and_at_least_one() {
    // A share as large as the pool: one principal may fill it, and the next stream (another
    // principal's) meets the limit in all, with its own code.
    let s = start_with(
        Limits::default()
            .max_listen_streams(2)
            .max_listen_streams_per_principal(2),
    )
    .await;
    let first = listen_response(&s.url, READER, &[]).await;
    assert_eq!(first.status().as_u16(), 200);
    let second = listen_response(&s.url, READER, &[]).await;
    assert_eq!(second.status().as_u16(), 200);
    let (status, text) = refused_listen(&s.url, WRITER).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("\"too_many_streams\""), "{text}");

    // A pool of fewer than four still gives each principal one stream.
    assert_eq!(
        Limits::default()
            .max_listen_streams(3)
            .listen_streams_per_principal(),
        1
    );
    assert_eq!(Limits::default().listen_streams_per_principal(), 64);
    let (app, _probe) = app();
    let err = kberg_server::router(
        app,
        &kberg_server::HttpConfig::default()
            .limits(Limits::default().max_listen_streams_per_principal(0)),
    )
    .expect_err("a share of no stream");
    assert_eq!(err.code(), "invalid_config");
}
