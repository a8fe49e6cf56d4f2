//! The whole-turn deadline every provider runs: a server that drips its reply a byte at a time
//! (never pausing long enough for the idle timeout) or keeps answering "retry later" cannot
//! hold a turn past [`HttpOptions::turn_timeout`], streamed or not.

use std::sync::Arc;
use std::time::Duration;

use kberg_agent::{InferenceProvider, ProviderError, collect_stream};
use kberg_providers::HttpOptions;
use kberg_testkit::scripted::{Reply, ScriptedServer};
use tokio_util::sync::CancellationToken;

use super::Wire;
use super::credentials::{failed_turn, request};

/// Makes the provider under test for a server URL with these HTTP options.
pub type MakeWithOptions<'a> = &'a dyn Fn(String, HttpOptions) -> Arc<dyn InferenceProvider>;

/// `reply`'s body sent one character at a time, `gap` apart: each piece comes well within the
/// idle timeout, the whole takes as long as the body is long times `gap`.
fn dripped(reply: Reply, gap: Duration) -> Reply {
    let body: String = reply.chunks.iter().map(|(_, p)| p.as_str()).collect();
    Reply {
        chunks: body.chars().map(|c| (gap, c.to_string())).collect(),
        ..reply
    }
}

/// A dripped stream, a dripped non-streamed reply, and 503s asking to retry in 5 s each end
/// as a `timeout` carrying the turn's deadline, long before the server would have finished
/// (each takes seconds; the deadline is 200 ms). A turn within its deadline is untouched.
pub async fn scenario_turn_deadline(wire: &dyn Wire, make: MakeWithOptions<'_>) {
    let gap = Duration::from_millis(10);
    let busy = || {
        Reply::json(503, &serde_json::json!({"error": {"message": "busy"}}))
            .header("retry-after", "5")
    };
    let server = ScriptedServer::start(vec![
        dripped(wire.text("the answer, slowly", true), gap),
        dripped(wire.text("the answer, slowly", false), gap),
        busy(),
        busy(),
        busy(),
    ])
    .await;
    let deadline = Duration::from_millis(200);
    let p = make(server.url(), HttpOptions::default().turn_timeout(deadline));
    for stream in [true, false, false] {
        let e = failed_turn(p.as_ref(), stream).await;
        assert_eq!(e.code(), "timeout", "stream {stream}: {e}");
        assert!(
            matches!(e, ProviderError::TurnTimeout(d) if d == deadline),
            "stream {stream}: the turn's deadline is named: {e:?}"
        );
    }

    // Within its deadline a turn completes as usual.
    let server = ScriptedServer::start(vec![wire.text("hi", true), wire.text("hi", false)]).await;
    let p = make(
        server.url(),
        HttpOptions::default().turn_timeout(Duration::from_secs(600)),
    );
    let cancel = CancellationToken::new();
    let s = p.chat_stream(&request(), &cancel).await.unwrap();
    assert_eq!(collect_stream(s, |_| {}).await.unwrap().text, "hi");
    assert_eq!(p.chat(&request(), &cancel).await.unwrap().text, "hi");
}
