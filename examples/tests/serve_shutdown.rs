//! Graceful shutdown of a real `bridle serve` process: SIGTERM with a tool call in flight.
//! The gateway stops being ready and refuses new MCP requests at once, lets the in-flight call
//! finish and answer, closes its sessions and streams, and exits 0; its JSON log (at `trace`)
//! says what it did and carries no token. With a call that never finishes, the shutdown grace
//! bounds the wait: the process still exits, and says so. A gateway whose stdout is closed
//! from the start (its reader gone) loses its announcements but keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

#[path = "../../bridle-gateway/tests/ops_support/mod.rs"]
mod ops_support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use kberg_agent::{McpSurface, ToolSurface};
use kberg_testkit::eventually_async;
use ops_support::{data_dir, poll_json, start_upstream, token};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A spawned `bridle serve`, killed by pid if the test fails before it exits.
struct Serve {
    child: Child,
    base: String,
    url: String,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines `child` writes on its (piped) stderr, read on a thread of their own until it
/// closes.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let err = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    lines
}

fn spawn(dir: &std::path::Path, grace_secs: u64, level: &str) -> Serve {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bridle"));
    cmd.arg("--data-dir")
        .arg(dir)
        .args(["--log", level, "--log-format", "json", "serve"])
        .args(["--listen", "127.0.0.1:0", "--shutdown-grace"])
        .arg(grace_secs.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let (mut child, url, _stdout) = bridle_support::spawn_announced(&mut cmd);
    let stderr = stderr_lines(&mut child);
    let base = url.trim_end_matches("/mcp").to_string();
    Serve {
        child,
        base,
        url,
        stderr,
    }
}

/// A gateway with the upstream `tickets`, spawned with `grace_secs` of shutdown grace, ready,
/// with claude's `tickets__slow` call in flight (it has reached the upstream).
struct InFlight {
    upstream: ops_support::Upstream,
    _dir: tempfile::TempDir,
    serve: Serve,
    call: tokio::task::JoinHandle<(
        Result<kberg_agent::ToolResult, kberg_agent::SurfaceError>,
        McpSurface,
    )>,
    token: String,
    http: reqwest::Client,
}

async fn call_in_flight(grace_secs: u64, level: &str) -> InFlight {
    let upstream = start_upstream().await;
    let dir = data_dir(Some(&upstream.url), "");
    let token = token(dir.path(), "claude");
    let serve = spawn(dir.path(), grace_secs, level);
    let http = reqwest::Client::new();
    let (status, body) = poll_json(&http, &format!("{}/readyz", serve.base), |s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");
    let claude = McpSurface::connect_http_with_bearer(&serve.url, &token)
        .await
        .unwrap();
    let started = upstream.started.notified();
    let call = tokio::spawn(async move {
        let r = claude
            .call("tickets__slow", json!({}), CancellationToken::new())
            .await;
        (r, claude)
    });
    tokio::time::timeout(kberg_testkit::WAIT, started)
        .await
        .expect("the slow call reached the upstream");
    InFlight {
        upstream,
        _dir: dir,
        serve,
        call,
        token,
        http,
    }
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

/// Waits (up to [`WAIT`](kberg_testkit::WAIT)) for the process to exit; returns whether it
/// exited 0.
async fn exited(child: &mut Child) -> bool {
    eventually_async("bridle serve to exit after SIGTERM", || {
        let exited = child.try_wait().unwrap().map(|status| status.success());
        async move { exited }
    })
    .await
}

/// Every stderr line of the exited process, each checked to be one JSON object. Read up to the
/// end of the pipe (the reader thread then ends, closing the channel), within
/// [`WAIT`](kberg_testkit::WAIT): seeing the process exit does not mean the reader thread has
/// passed on its last lines yet, and those are the shutdown's.
fn json_log(rx: &mpsc::Receiver<String>) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + kberg_testkit::WAIT;
    let mut log = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                log.push(serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return log,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("the gateway's stderr was not closed within the deadline")
            }
        }
    }
}

fn logged(log: &[serde_json::Value], message: &str) -> bool {
    log.iter().any(|e| {
        e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(message))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_call_in_flight_finish_then_exits() {
    let InFlight {
        upstream,
        _dir,
        mut serve,
        call,
        token: claude_token,
        http,
    } = call_in_flight(30, "trace").await;
    let readyz = format!("{}/readyz", serve.base);
    sigterm(&serve.child);
    let (status, body) = poll_json(&http, &readyz, |s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["not_ready"][0]["name"], "shutdown", "{body}");
    // A new MCP request is refused while the gateway drains.
    let r = http
        .post(&serve.url)
        .bearer_auth(&claude_token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let refused: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(refused["error"], "shutting_down");
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "the gateway waits for the call in flight"
    );

    upstream.release.notify_one();
    let (r, _claude) = tokio::time::timeout(kberg_testkit::WAIT, call)
        .await
        .expect("the call answered")
        .unwrap();
    let r = r.expect("the in-flight call got its answer");
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.text, "finished");

    assert!(exited(&mut serve.child).await, "bridle serve exits 0");
    assert!(
        std::net::TcpStream::connect(serve.base.trim_start_matches("http://")).is_err(),
        "the listener is closed"
    );
    let log = json_log(&serve.stderr);
    assert!(logged(&log, "shutdown signal received"), "{log:?}");
    assert!(
        logged(&log, "shutting down: finishing in-flight calls"),
        "{log:?}"
    );
    assert!(logged(&log, "the gateway has stopped"), "{log:?}");
    assert!(!logged(&log, "the shutdown grace passed"), "{log:?}");
    // Logged at `trace`, the most the log ever shows: the agent's token is in none of it.
    let text = serde_json::to_string(&log).unwrap();
    assert!(!text.contains(&claude_token), "a token reached the log");
    upstream.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_bounds_a_call_that_never_finishes() {
    let InFlight {
        upstream,
        _dir,
        mut serve,
        call,
        ..
    } = call_in_flight(1, "info").await;
    sigterm(&serve.child);
    assert!(exited(&mut serve.child).await, "bridle serve exits 0");
    // Whether and when the client notices is the client's business; the gateway is gone.
    call.abort();
    let log = json_log(&serve.stderr);
    assert!(logged(&log, "the shutdown grace passed"), "{log:?}");
    upstream.release.notify_one();
    upstream.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_does_not_stop_the_gateway() {
    let dir = data_dir(None, "");
    // The gateway picks its port; its announcement on stdout goes nowhere, so the port is
    // read from its log.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_bridle"))
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "--log",
            "info",
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--admin-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = stderr_lines(&mut child);
    let mut serve = Serve {
        child,
        base: String::new(),
        url: String::new(),
        stderr,
    };
    let deadline = std::time::Instant::now() + kberg_testkit::WAIT;
    serve.url = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = serve
            .stderr
            .recv_timeout(left)
            .expect("the gateway logs where it listens");
        let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if entry["fields"]["message"] == "the MCP endpoint is listening" {
            break entry["fields"]["url"].as_str().unwrap().to_string();
        }
    };
    serve.base = serve.url.trim_end_matches("/mcp").to_string();
    let http = reqwest::Client::new();
    let (status, body) = poll_json(&http, &format!("{}/readyz", serve.base), |s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "the gateway is still running"
    );
    sigterm(&serve.child);
    assert!(exited(&mut serve.child).await, "bridle serve exits 0");
}
