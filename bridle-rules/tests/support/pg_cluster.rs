//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary folder, `pg_ctl start` on a
//! free 127.0.0.1 port, password authentication over TCP, and a fresh database per test.
//!
//! The server is stopped by its process id, however the test process ends: a small guard
//! process waits for the test process's end of a pipe to close (a normal exit, a panic, an
//! abort, a kill) and then stops the postmaster and removes the folder. When the tests run as
//! root (initdb refuses root), the server runs as the unprivileged `postgres` user. Missing
//! server binaries fail the test with the install command; nothing skips silently.
//!
//! Shared by the bridle-rules and bridle-gateway tests (`#[path]`-included).

#![allow(dead_code)] // Each including test binary uses its own part.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use bridle_rules::db::postgres::{PgDatabase, PgSettings};

/// The superuser the cluster is created with, and its password.
pub const SUPERUSER: &str = "bridle";
/// The superuser's password (the tests pass it separately from the URL, as the gateway does).
pub const PASSWORD: &str = "test-only-password";

/// A running cluster.
pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    pid: u32,
    guard: Option<Child>,
}

fn bin_dir() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").is_file() && p.join("pg_ctl").is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin; \
             install them with `apt-get install -y postgresql` (scripts/install-tools.sh does this)"
        )
    })
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A command run as the server's user.
fn as_server_user(program: &Path) -> Command {
    if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn run(mut c: Command, what: &str) {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgCluster {
    /// Creates and starts a cluster (a second or two).
    pub fn start() -> Self {
        let bin = bin_dir();
        let root = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("bridle-pg-")
            .tempdir()
            .expect("a temporary folder")
            .keep();
        let data = dir.join("data");
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).expect("writing the password file");
        if root {
            run(
                {
                    let mut c = Command::new("chown");
                    c.args(["-R", "postgres:postgres"]).arg(&dir);
                    c
                },
                "chown of the cluster folder",
            );
        }
        let mut initdb = as_server_user(&bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "-E", "UTF8", "--no-sync", "--locale=C"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()));
        run(initdb, "initdb");
        let port = free_port();
        let mut start = as_server_user(&bin.join("pg_ctl"));
        start
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                dir.display()
            ))
            .args(["-w", "-t", "60", "start"]);
        let out = start.output().expect("pg_ctl start");
        if !out.status.success() {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            let _ = std::fs::remove_dir_all(&dir);
            panic!(
                "pg_ctl start failed: {}{}\n{log}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let pid: u32 = std::fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            .expect("postmaster.pid names the server's process");
        // Stops the server by its pid once the test process's end of the pipe closes, however
        // the process ends; ignores the terminal's interrupt so it still cleans up after ^C.
        let script = format!(
            "trap '' INT TERM HUP; cat >/dev/null; kill -QUIT {pid} 2>/dev/null; \
             while kill -0 {pid} 2>/dev/null; do sleep 0.1; done; rm -rf '{}'",
            dir.display()
        );
        let guard = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the cluster's guard");
        Self {
            dir,
            port,
            pid,
            guard: Some(guard),
        }
    }

    /// One cluster for the whole test binary (stopped by its guard when the process ends).
    pub fn shared() -> &'static PgCluster {
        static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
        CLUSTER.get_or_init(PgCluster::start)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The URL of a database, without the password.
    pub fn url(&self, dbname: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{dbname}", self.port)
    }

    /// Settings for a database, with the password.
    pub fn settings(&self, dbname: &str) -> PgSettings {
        PgSettings::from_url(&self.url(dbname))
            .expect("a well-formed URL")
            .with_password(PASSWORD)
    }

    /// Creates a new, empty database and returns its name.
    pub fn create_database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let admin = PgDatabase::connect(&self.settings("postgres").with_max_connections(1))
            .expect("connecting to the cluster");
        admin
            .client()
            .and_then(|c| c.batch(&format!("CREATE DATABASE {name}")))
            .expect("CREATE DATABASE");
        name
    }

    /// Stops the server now (by its pid) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            // Closing the pipe lets the guard stop the server and remove the folder.
            if let Some(mut stdin) = guard.stdin.take() {
                let _ = stdin.flush();
            }
            let _ = guard.wait();
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
