//! Data directories of gateway replicas that share one PostgreSQL database, laid out on disk as
//! an operator would: each replica its own `bridle.yaml` naming the same `database:`, the same
//! master key file and the same admin credential file (as Docker secrets would be), and two
//! agents, `claude` and `codex`, whose tokens are file secrets.
//!
//! Only the first replica's directory holds `projects/demo.yaml` (the demo document, in which
//! `claude` may propose): it is imported into the database when that replica opens it, and
//! every other replica writes it out from the database. Start the first one first.
//!
//! Shared by `examples/tests/bridle_replicas.rs` (which runs `bridle serve` on them) and
//! `benches/benches/replicas.rs` (which builds the gateways in process), `#[path]`-included.

#![allow(dead_code)] // Each including target uses its own part.

use std::path::{Path, PathBuf};

/// The agent every replica knows.
pub const AGENT: &str = "claude";
/// Its bearer token (a file secret in each replica's `secrets/`).
pub const AGENT_TOKEN: &str = "claude-replicas-token-0123456789abcdef";
/// A second agent every replica knows (for what one agent must not do to another's session).
pub const OTHER_AGENT: &str = "codex";
/// Its bearer token.
pub const OTHER_TOKEN: &str = "codex-replicas-token-fedcba9876543210";
/// The admin credential every replica's admin API accepts (from `admin.token_file`).
pub const ADMIN_TOKEN: &str = "bda_replicas-admin-0123456789abcdef";
/// The project in the first replica's directory.
pub const PROJECT: &str = "demo";

/// The files every replica shares, and their data directories.
pub struct ReplicaDirs {
    shared: tempfile::TempDir,
    dirs: Vec<tempfile::TempDir>,
}

impl ReplicaDirs {
    /// Lays out `n` data directories on the database at `database_url` (no password in it),
    /// whose password is `password`.
    pub fn lay_out(n: usize, database_url: &str, password: &str) -> Self {
        let shared = tempfile::Builder::new()
            .prefix("bridle-replicas-")
            .tempdir()
            .expect("a temporary folder");
        let master_key = shared.path().join("master.key");
        bridle_gateway::vault::MasterKey::load_or_create(&master_key).expect("a master key");
        let admin_token = shared.path().join("admin-token");
        std::fs::write(&admin_token, format!("{ADMIN_TOKEN}\n")).expect("the admin token");
        let demo = bridle_rules::to_yaml(&bridle_gateway::config::demo_document())
            .expect("the demo document as YAML");
        let dirs = (0..n)
            .map(|i| {
                let dir = tempfile::Builder::new()
                    .prefix(&format!("bridle-replica-{i}-"))
                    .tempdir()
                    .expect("a temporary folder");
                let d = dir.path();
                std::fs::create_dir_all(d.join("secrets")).expect("secrets/");
                std::fs::create_dir_all(d.join("projects")).expect("projects/");
                std::fs::write(d.join("secrets/pg-password"), format!("{password}\n"))
                    .expect("the database password");
                std::fs::write(
                    d.join(format!("secrets/{AGENT}-token")),
                    format!("{AGENT_TOKEN}\n"),
                )
                .expect("the agent token");
                std::fs::write(
                    d.join(format!("secrets/{OTHER_AGENT}-token")),
                    format!("{OTHER_TOKEN}\n"),
                )
                .expect("the other agent's token");
                std::fs::write(
                    d.join("bridle.yaml"),
                    format!(
                        "listen: 127.0.0.1:0\n\
                         database: {database_url}\n\
                         database_password: file:pg-password\n\
                         vault:\n  master_key: {}\n\
                         admin:\n  token_file: {}\n\
                         agents:\n  {AGENT}:\n    type: claude\n    token_secret: {AGENT}-token\n    projects: [{PROJECT}]\n  \
                         {OTHER_AGENT}:\n    type: codex\n    token_secret: {OTHER_AGENT}-token\n    projects: [{PROJECT}]\n",
                        master_key.display(),
                        admin_token.display(),
                    ),
                )
                .expect("bridle.yaml");
                if i == 0 {
                    std::fs::write(d.join(format!("projects/{PROJECT}.yaml")), &demo)
                        .expect("the demo project");
                }
                dir
            })
            .collect();
        Self { shared, dirs }
    }

    /// The data directory of replica `i`.
    pub fn dir(&self, i: usize) -> &Path {
        self.dirs[i].path()
    }

    /// The master key file every replica reads.
    pub fn master_key(&self) -> PathBuf {
        self.shared.path().join("master.key")
    }
}
