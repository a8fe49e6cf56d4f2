//! An index run's end and its tag: a follower told that a run ended (`done` or `error`, as the
//! admin API's event stream and status tell it) may at once start the next run on the tag, or
//! remove the example, as a client that re-indexes on `done` does. The tag must be free by
//! then; were it given back only after the end is told, that client would be refused
//! `index_running` by a run that is over.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::sync::Arc;

use bridle_gateway::memory::runs::RunStart;
use bridle_gateway::memory::{IndexRuns, RunEventKind, RunOrigin};
use futures::StreamExt;
use serde_json::json;

const TAG: &str = "retry-example";

fn start() -> RunStart {
    RunStart {
        reference_tag: TAG.into(),
        project: Some("demo".into()),
        pattern: Some("retry".into()),
        origin: RunOrigin::Api,
        actor: "admin:alice@api".into(),
    }
}

/// Runs `rounds` runs one after the other, each ended by `end` on a thread of its own while a
/// follower waits for the end and then starts the next run at once.
async fn a_follower_told_the_end_finds_the_tag_free(
    rounds: usize,
    end: fn(bridle_gateway::memory::runs::RunHandle),
) {
    let runs = IndexRuns::default();
    for round in 0..rounds {
        let handle = runs.start(start()).expect("the tag is free");
        let run = Arc::clone(handle.run());
        let follower = {
            let runs = runs.clone();
            tokio::spawn(async move {
                let mut events = Box::pin(run.follow(0));
                while let Some(e) = events.next().await {
                    if matches!(e.kind, RunEventKind::Done | RunEventKind::Error) {
                        break;
                    }
                }
                // Told it ended: the next run, at once.
                runs.start(start()).map(drop)
            })
        };
        tokio::task::spawn_blocking(move || end(handle))
            .await
            .unwrap();
        let next = follower.await.unwrap();
        assert!(
            next.is_ok(),
            "round {round}: a run told ended still held its tag: {next:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_told_done_has_given_its_tag_back() {
    a_follower_told_the_end_finds_the_tag_free(2_000, |h| {
        h.finish(RunEventKind::Done, json!({"report": {}}));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_unfinished_has_given_its_tag_back_when_told_interrupted() {
    a_follower_told_the_end_finds_the_tag_free(2_000, drop).await;
}
