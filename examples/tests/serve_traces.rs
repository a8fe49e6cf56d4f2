//! Traces from a real `bridle serve` process: with `OTEL_EXPORTER_OTLP_ENDPOINT` naming a
//! collector on loopback (an OTLP/HTTP stand-in that records each export), a tool call through
//! the gateway to an upstream leaves as OTLP protobuf on `/v1/traces` (the gateway's server and
//! client spans, flushed when SIGTERM stops the process), the JSON log stays one object per
//! line, and no token reaches an export.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

#[path = "../../bridle-gateway/tests/ops_support/mod.rs"]
mod ops_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use kberg_agent::{McpSurface, ToolSurface};
use kberg_testkit::eventually_async;
use ops_support::{data_dir, poll_json, start_upstream, token};
use serde_json::json;
use tokio_util::sync::CancellationToken;

type Exports = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An OTLP/HTTP collector stand-in: answers `200` with an empty protobuf response, as the OTLP
/// specification says a collector answers a whole success.
async fn collector() -> (String, Exports) {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, Uri};
    let got: Exports = Arc::default();
    let g = Arc::clone(&got);
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
        let g = Arc::clone(&g);
        async move {
            let ct = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            g.lock()
                .unwrap()
                .push((uri.path().to_string(), ct, body.to_vec()));
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_leaves_as_otlp_and_the_log_stays_json() {
    let (collector, exports) = collector().await;
    let upstream = start_upstream().await;
    let dir = data_dir(Some(&upstream.url), "");
    let claude = token(dir.path(), "claude");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bridle"));
    cmd.arg("--data-dir")
        .arg(dir.path())
        .args(["--log", "info", "--log-format", "json", "serve"])
        .args(["--listen", "127.0.0.1:0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let (mut child, url, _stdout) = bridle_support::spawn_announced(&mut cmd);
    let err = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(err)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let base = url.trim_end_matches("/mcp").to_string();
    let http = reqwest::Client::new();
    let (status, body) = poll_json(&http, &format!("{base}/readyz"), |s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");

    let surface = McpSurface::connect_http_with_bearer(&url, &claude)
        .await
        .unwrap();
    let r = surface
        .call("tickets__whoami", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    drop(surface);

    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = eventually_async("the process to exit", || {
        let exited = child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert!(status.success(), "{status:?}");
    let log = lines.join().unwrap();
    for l in &log {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v.is_object());
    }
    assert!(
        log.iter().any(|l| l.contains("exporting traces over OTLP")),
        "{log:?}"
    );

    let got = exports.lock().unwrap().clone();
    assert!(!got.is_empty(), "nothing exported");
    for (path, ct, _) in &got {
        assert_eq!(path, "/v1/traces");
        assert_eq!(ct, "application/x-protobuf");
    }
    let all: Vec<u8> = got.iter().flat_map(|(_, _, b)| b.clone()).collect();
    let has = |n: &[u8]| all.windows(n.len()).any(|w| w == n);
    assert!(has(b"tools/call tickets__whoami"));
    assert!(has(b"tools/call whoami"));
    assert!(!has(claude.as_bytes()), "a token in an export");
    upstream.stop.cancel();
}
