//! What an upstream chose (its tools' and prompts' names, an error's message, a line of its
//! stderr) is written into the aggregator's text log escaped: a line break, CR, line separator
//! or ESC in it cannot start a forged line of the log, or drive the terminal that shows it. The
//! scripted upstream (`aggregate_raw_upstream.py` with `RAW_FORGE`) puts `FORGED` after each.

mod peers;

use kberg_core::{PromptRegistry, ResourceRegistry, ToolRegistry};
use kberg_server::aggregate::{Aggregator, AggregatorConfig, Forward, UpstreamConfig};
use kberg_testkit::log::LogBuffer;
use peers::*;

#[tokio::test(flavor = "current_thread")]
async fn an_upstreams_words_cannot_forge_a_log_line() {
    let logs = LogBuffer::default();
    // rmcp traces message bodies at TRACE; an embedding server caps it below that.
    let _guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::DEBUG));
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "raw",
        raw_upstream().env("RAW_FORGE", "1"),
    ));
    let agg = Aggregator::start_with(
        config,
        ToolRegistry::new(),
        Forward::new()
            .prompts(PromptRegistry::new())
            .resources(ResourceRegistry::new()),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    logs.wait_for("upstream tool skipped").await;
    logs.wait_for("upstream prompt skipped").await;
    logs.wait_for("listing resources failed").await;
    let text = logs.wait_for("raw upstream forging").await;
    let forged: Vec<&str> = text.lines().filter(|l| l.starts_with("FORGED")).collect();
    assert!(forged.is_empty(), "forged lines {forged:?} in:\n{text}");
    assert!(
        !text.contains(['\r', '\u{2028}', '\u{1b}']),
        "a raw CR, line separator or ESC in:\n{text:?}"
    );
    // What the upstream said is all there, escaped.
    for said in [
        r"forged\nFORGED tool line",
        r"forged\nFORGED prompt line",
        r"no resources\r\nFORGED resources line",
        r"raw upstream forging\u{2028}FORGED separator line\rFORGED cr line\u{1b}[2K done",
    ] {
        assert!(text.contains(said), "`{said}` is not in:\n{text}");
    }
    agg.shutdown().await;
}
