//! A private git host on 127.0.0.1: git's own smart-HTTP server (`git http-backend`, run as CGI
//! by `fixtures/git_http_server.py` under the pinned Python) behind HTTP Basic authentication,
//! serving one repository, for the tests of cloning with a credential kept out of the URL.
//!
//! ```no_run
//! let host = kberg_testkit::git::PrivateGitHost::start("bot", "s3cret", &[("src/lib.rs", "pub fn f() {}\n")]);
//! let url = host.url("team/app.git"); // http://127.0.0.1:<port>/team/app.git
//! // ... clone it ...
//! assert!(host.seen().iter().all(|line| line.ends_with("auth=yes")));
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use crate::WAIT;

/// Runs `git args` in `dir` with a fixed author, and fails the test if git fails.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git must be installed to run this test");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The host: its process (killed when this is dropped), its port and the requests it saw.
pub struct PrivateGitHost {
    _dir: tempfile::TempDir,
    child: Child,
    /// The port it listens on.
    pub port: u16,
    lines: mpsc::Receiver<String>,
}

impl Drop for PrivateGitHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PrivateGitHost {
    /// Serves `team/app.git`, one commit of `files` (relative path, text), to the one account
    /// `user` with the password `secret`; every other request gets 401.
    pub fn start(user: &str, secret: &str, files: &[(&str, &str)]) -> PrivateGitHost {
        let dir = tempfile::tempdir().expect("temp dir");
        let work = dir.path().join("work");
        for (rel, text) in files {
            let path = work.join(rel);
            std::fs::create_dir_all(path.parent().expect("a file in a folder")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        git(&work, &["init", "-q"]);
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "first"]);
        let served = dir.path().join("served");
        std::fs::create_dir_all(served.join("team")).expect("mkdir");
        git(
            dir.path(),
            &[
                "clone",
                "-q",
                "--bare",
                &work.to_string_lossy(),
                &served.join("team/app.git").to_string_lossy(),
            ],
        );
        let script = crate::tools::need(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/git_http_server.py"),
        );
        let mut child = Command::new(crate::tools::python())
            .arg("-u")
            .arg(script)
            .arg(&served)
            .env("GIT_SERVER_USER", user)
            .env("GIT_SERVER_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the git host");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("the port");
        let port = first.trim().parse().expect("a port number");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        PrivateGitHost {
            _dir: dir,
            child,
            port,
            lines,
        }
    }

    /// `http://127.0.0.1:<port>/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// The requests seen since the last call, one line each: `<method> <path>
    /// auth=<yes|no|empty|other>` (the right credential, none, the empty one git sends when
    /// its prompt answers nothing, or another). A request of this call's own marks the end, so
    /// every request made before it is in the list.
    pub fn seen(&self) -> Vec<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.write_all(b"GET /end-of-requests HTTP/1.0\r\n\r\n")
            .expect("send");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let mut seen = Vec::new();
        loop {
            let line = self.lines.recv_timeout(WAIT).expect("the host's log");
            if line.starts_with("GET /end-of-requests ") {
                return seen;
            }
            seen.push(line);
        }
    }
}
