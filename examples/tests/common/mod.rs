//! What every interop test needs: the pinned third-party tools, a Kberg app served on a free
//! loopback port (stopped when the test ends, pass or fail), and running a client script with a
//! deadline.

#![allow(dead_code)] // each test file uses a different part

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kberg_server::{HttpConfig, HttpServer};
use stop::Stop;
use tokio::process::Command;

/// Where `scripts/install-tools.sh` put the tools: `$KBERG_TOOLS_DIR`, or `<repo>/.tools`.
pub fn tools_dir() -> PathBuf {
    match std::env::var_os("KBERG_TOOLS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"),
    }
}

/// A tool under the tools directory; panics with what to do when it is missing.
pub fn tool(relative: &str) -> PathBuf {
    let p = tools_dir().join(relative);
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

/// The client scripts beside the tests.
pub fn client_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

mod stop {
    /// Stops a server when dropped, so a failing test still stops it.
    pub struct Stop(pub Option<tokio::sync::oneshot::Sender<()>>);

    impl Drop for Stop {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
}

/// The notes app served over Streamable HTTP on 127.0.0.1 (free port), with its bearer tokens.
pub struct NotesServer {
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The app's state.
    pub state: std::sync::Arc<kberg_examples::notes::NotesState>,
    _stop: Stop,
}

/// Starts the notes app; it stops when the returned value is dropped.
pub async fn start_notes() -> NotesServer {
    let notes = kberg_examples::notes::app().expect("the notes app builds");
    let config = HttpConfig::new("127.0.0.1:0".parse().expect("a socket address"))
        .auth(kberg_examples::notes::bearer_tokens());
    let server = HttpServer::bind(notes.app, config)
        .await
        .expect("binds a free loopback port");
    let url = format!("http://{}/mcp", server.local_addr());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .run(async {
                let _ = rx.await;
            })
            .await;
    });
    NotesServer {
        url,
        state: notes.state,
        _stop: Stop(Some(tx)),
    }
}

/// What a client script printed and how it ended.
pub struct ClientRun {
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl ClientRun {
    /// Asserts a clean exit and that every named check printed `ok <name>`.
    pub fn assert_passed(&self, checks: &[&str]) {
        let report = format!(
            "client exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        assert_eq!(self.code, Some(0), "the client failed:\n{report}");
        for c in checks {
            let ok = self
                .stdout
                .lines()
                .any(|l| l == format!("ok {c}") || l.starts_with(&format!("ok {c} ")));
            assert!(ok, "check `{c}` did not pass:\n{report}");
        }
    }

    /// The protocol version the client reported on its last line (`done <version>`).
    pub fn version(&self) -> Option<&str> {
        self.stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("done "))
    }
}

/// Runs a client program to completion (killed after `deadline`).
pub async fn run_client(program: PathBuf, args: Vec<String>, deadline: Duration) -> ClientRun {
    let mut cmd = Command::new(&program);
    cmd.args(&args);
    run_command(cmd, deadline).await
}

/// Runs a prepared command to completion with no standard input, its output captured; after
/// `deadline` its whole process group is stopped and the test fails, naming the command.
pub async fn run_command(mut cmd: Command, deadline: Duration) -> ClientRun {
    let what = format!("{:?}", cmd.as_std());
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so a deadline stops it together with whatever it started (the
    // conformance script's server, the Python SDK's stdio child, a CLI's relaunched child).
    #[cfg(unix)]
    cmd.process_group(0);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let pid = child.id();
    let out = match tokio::time::timeout(deadline, child.wait_with_output()).await {
        Ok(out) => out.expect("the client's output is readable"),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", "--", &format!("-{pid}")])
                    .status();
            }
            panic!("{what} did not finish in {deadline:?}");
        }
    };
    ClientRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The checks every notes client prints on a full pass.
pub const NOTES_CHECKS: &[&str] = &[
    "connected",
    "list-tools",
    "call-read",
    "write-refused",
    "invalid-arguments",
    "resource-updated",
    "read-after-update",
    "progress",
    "slow-call-cancelled-by-client",
    "tool-observed-cancellation",
    "unknown-tool",
    "session-ended",
];
