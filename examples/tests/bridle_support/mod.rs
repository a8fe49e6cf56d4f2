//! Shared pieces of the `bridle` binary's end-to-end tests: a data directory laid out on disk,
//! the gateway started as a real process on a free loopback port (and stopped by pid even when a
//! test fails), the command line run as a subprocess, and the pinned Python SDK located.

#![allow(dead_code)] // Each test file uses a different subset.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `bridle` binary Cargo built for these tests.
pub fn bridle_bin() -> &'static str {
    env!("CARGO_BIN_EXE_bridle")
}

/// The pinned third-party tools: `$KBERG_TOOLS_DIR`, else `<repo>/.tools`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

/// The Python with the pinned `mcp` SDK.
pub fn python() -> PathBuf {
    let p = tools_dir().join("venv/bin/python");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

/// A client script under `tests/clients/`.
pub fn client_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// One agent of a test configuration.
pub struct TestAgent {
    pub name: &'static str,
    pub agent_type: &'static str,
    pub token: &'static str,
    pub projects: &'static [&'static str],
}

/// Writes `bridle.yaml`, one secret file per agent, and project documents.
pub fn lay_out(dir: &Path, agents: &[TestAgent], projects: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    std::fs::create_dir_all(dir.join("projects")).unwrap();
    let mut config = String::from("listen: 127.0.0.1:0\nagents:\n");
    for a in agents {
        // An empty type is left out, so the gateway guesses it from the name.
        let ty = if a.agent_type.is_empty() {
            String::new()
        } else {
            format!("    type: {}\n", a.agent_type)
        };
        config.push_str(&format!(
            "  {}:\n{ty}    token_secret: {}-token\n    projects: [{}]\n",
            a.name,
            a.name,
            a.projects.join(", ")
        ));
        std::fs::write(
            dir.join(format!("secrets/{}-token", a.name)),
            format!("{}\n", a.token),
        )
        .unwrap();
    }
    std::fs::write(dir.join("bridle.yaml"), config).unwrap();
    for (name, doc) in projects {
        std::fs::write(dir.join(format!("projects/{name}.yaml")), doc).unwrap();
    }
}

/// Runs `bridle --data-dir DIR ARGS...` to completion.
pub fn run_bridle(dir: &Path, args: &[&str]) -> Output {
    Command::new(bridle_bin())
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A running `bridle serve`, killed by pid when dropped.
pub struct Server {
    child: Child,
    /// The MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Everything it printed on stdout before the URL line and after, as it arrives.
    pub stdout: mpsc::Receiver<String>,
    /// Everything it logged on stderr so far (also passed on to the test's own stderr).
    logs: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `bridle serve` on a free port and waits for the line announcing its address.
    pub fn start(dir: &Path) -> Server {
        let mut child = Command::new(bridle_bin())
            .arg("--data-dir")
            .arg(dir)
            .args(["--log", "warn", "serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let kept = std::sync::Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                let mut kept = kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            url: String::new(),
            stdout: rx,
            logs,
        };
        let first = server
            .stdout
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("bridle serve printed no address: {e}"));
        let url = first
            .strip_prefix("bridle: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
        server.url = url.to_string();
        server
    }

    /// What follows `prefix` on the next line starting with it that it prints, within a
    /// deadline (the lines before it are passed over).
    pub fn printed_line(&self, prefix: &str) -> String {
        loop {
            let line = self
                .stdout
                .recv_timeout(kberg_testkit::WAIT)
                .unwrap_or_else(|e| panic!("no `{prefix}` line from bridle serve: {e}"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
    }

    /// The next line it prints, within a deadline.
    pub fn next_line(&self) -> String {
        self.stdout
            .recv_timeout(kberg_testkit::WAIT)
            .unwrap_or_else(|e| panic!("bridle serve printed nothing more: {e}"))
    }

    /// The rest of what it printed so far.
    pub fn printed(&self) -> Vec<String> {
        self.stdout.try_iter().collect()
    }

    /// What it logged on stderr so far, for the canary checks.
    pub fn logged(&self) -> String {
        self.logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Kills it with SIGKILL (`kill -9`: no shutdown of any kind) and reaps it.
    pub fn kill_now(&mut self) {
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        assert!(!status.success(), "bridle serve was killed: {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed by pid when dropped (for client scripts that may hang on failure).
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads lines from a child's stdout on a thread. The thread reads to the end even when the
/// receiver is dropped, so the child never writes to a closed pipe.
pub fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits for a line starting with `prefix`, failing after a generous deadline.
pub fn expect_line(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    loop {
        match rx.recv_timeout(Duration::from_secs(90)) {
            Ok(line) if line.starts_with(prefix) => return line,
            Ok(_) => continue,
            Err(e) => panic!("no `{prefix}` line from the client ({e}); see its stderr above"),
        }
    }
}

/// Spawns `cmd` (a `bridle ... serve` command line) with stdout piped, and waits for the line
/// announcing its address. Returns the child, the MCP URL, and the rest of its stdout.
pub fn spawn_announced(cmd: &mut Command) -> (Child, String, mpsc::Receiver<String>) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let stdout = lines_of(&mut child);
    let first = stdout
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("bridle serve printed no address: {e}"));
    let url = first
        .strip_prefix("bridle: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    (child, url, stdout)
}

/// A running gateway's admin API as the command line reaches it: its URL and a file holding
/// the credential `bridle serve` printed once.
pub struct AdminAccess {
    pub url: String,
    pub token_file: PathBuf,
}

impl AdminAccess {
    /// Reads the admin API's address and first-start credential from what `server` printed,
    /// and keeps the credential in `dir/admin-token-for-tests`.
    pub fn from_first_start(server: &Server, dir: &Path) -> AdminAccess {
        let url = server.printed_line("bridle: admin API on ");
        let _ = server.printed_line("admin credential for `admin`");
        let token = server.next_line();
        assert!(token.starts_with("bda_"), "{token}");
        let token_file = dir.join("admin-token-for-tests");
        std::fs::write(&token_file, &token).unwrap();
        AdminAccess { url, token_file }
    }

    /// The credential the command line is given.
    pub fn token(&self) -> String {
        std::fs::read_to_string(&self.token_file).unwrap()
    }

    /// The same admin API with another credential file (a wrong one, for the bad paths).
    pub fn with_token_file(&self, token_file: PathBuf) -> AdminAccess {
        AdminAccess {
            url: self.url.clone(),
            token_file,
        }
    }

    /// The same credential against another URL of the admin API.
    pub fn with_url(&self, url: &str) -> AdminAccess {
        AdminAccess {
            url: url.to_string(),
            token_file: self.token_file.clone(),
        }
    }

    /// `bridle --data-dir DIR ARGS... --url URL --admin-token-file FILE`, not yet run.
    pub fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(bridle_bin());
        cmd.arg("--data-dir")
            .arg(dir)
            .args(args)
            .arg("--url")
            .arg(&self.url)
            .arg("--admin-token-file")
            .arg(&self.token_file);
        cmd
    }

    /// Runs `bridle --data-dir DIR ARGS... --url URL --admin-token-file FILE`.
    pub fn run(&self, dir: &Path, args: &[&str]) -> Output {
        self.command(dir, args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The same run with `stdin` written to its standard input (a secret's value).
    pub fn run_with_stdin(&self, dir: &Path, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .command(dir, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

/// The stdout of a run that must have succeeded (its output shown when it did not).
pub fn succeeded(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The stderr of a run that must have failed.
pub fn failed(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what} should have failed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A vendor's documentation site, reduced to what a docs host does for one page: an HTTP/1.1
/// response (RFC 9112) with `Content-Type` and `Content-Length`, or a 404 for anything else.
/// Serves `requests` connections, then stops.
pub fn docs_site(body: &'static str, requests: usize) -> String {
    static_site(
        Some("/best-practices.md"),
        "text/markdown; charset=utf-8",
        body,
        requests,
    )
}

/// A web server that answers `GET path` (any request when `path` is `None`) with `200 OK` and
/// `body` as `content_type`, and anything else with a 404; serves `requests` connections, then
/// stops. Returns its base URL.
pub fn static_site(
    path: Option<&'static str>,
    content_type: &'static str,
    body: &'static str,
    requests: usize,
) -> String {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            let mut line = String::new();
            let mut length = 0usize;
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            // The request's own body, read so that closing does not reset the connection.
            let _ = std::io::Read::read_exact(&mut reader, &mut vec![0; length.min(1 << 20)]);
            let hit = match path {
                Some(p) => request_line.starts_with(&format!("GET {p} ")),
                None => true,
            };
            let (status, content) = if hit {
                ("200 OK", body)
            } else {
                ("404 Not Found", "not found\n")
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{content}",
                content.len()
            );
        }
    });
    format!("http://{addr}")
}
