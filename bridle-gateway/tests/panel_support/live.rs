//! A whole gateway for the panel's flows with a real agent: the MCP endpoint and the admin
//! listener (API and panel) on free loopback ports, the three demo agents with secret-file
//! tokens, and the demo project, created before the gateway is built (the gateway reads the
//! projects it serves rules resources for when it is built). Also the way to the official
//! Python MCP SDK the agents' side is driven with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::admin::AdminCredentials;
use bridle_gateway::config::{
    GatewayConfig, demo_document, init_data_dir_with_token_files, read_secret,
};
use bridle_gateway::{GatewayBuilder, GatewayContext};
use bridle_rules::{AgentCatalog, RulesStore};
use tokio::io::BufReader;
use tokio_util::sync::CancellationToken;

use super::{ALICE, BOB, RevocableAdmins, WATCHER, panel_config};

/// A running gateway with its admin listener serving the panel.
pub struct Live {
    pub tmp: tempfile::TempDir,
    pub ctx: Arc<GatewayContext>,
    /// The MCP endpoint.
    pub mcp: String,
    /// The admin listener's origin (`http://127.0.0.1:<port>`).
    pub origin: String,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Live {
    pub async fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        // Before the build: the gateway lists the projects it serves when it is built.
        RulesStore::open(tmp.path(), AgentCatalog::builtin())
            .unwrap()
            .create("demo", &demo_document(), "test")
            .unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let admins = RevocableAdmins::with(&[("alice", ALICE), ("bob", BOB), ("watcher", WATCHER)]);
        let gateway = GatewayBuilder::new(tmp.path(), config)
            .watch_every(Duration::from_millis(50))
            .admin(
                "127.0.0.1:0".parse().unwrap(),
                admins as Arc<dyn AdminCredentials>,
            )
            .build()
            .await
            .unwrap();
        let ctx = Arc::clone(gateway.context());
        let bound = gateway
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
            .panel(Some(panel_config()));
        let mcp = bound.url();
        let api = bound.admin_url().unwrap();
        let origin = api
            .strip_suffix(bridle_gateway::admin::BASE_PATH)
            .unwrap_or(&api)
            .to_string();
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            bound.run(async move { s.cancelled().await }).await.unwrap();
        });
        Self {
            tmp,
            ctx,
            mcp,
            origin,
            stop,
            task: Some(task),
        }
    }

    /// A demo agent's token from its secret file.
    pub fn file_token(&self, agent: &str) -> String {
        let secrets = self.ctx.config.secrets_path(self.tmp.path());
        read_secret(&secrets, &format!("{agent}-token")).unwrap()
    }

    pub fn proposal_status(&self, id: u64) -> String {
        self.ctx
            .store
            .proposal(id)
            .unwrap()
            .status
            .as_str()
            .to_string()
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(kberg_testkit::WAIT, task)
                .await
                .expect("the gateway stops")
                .unwrap();
        }
    }
}

/// The Python with the pinned MCP SDK (`.tools/venv`, from `scripts/install-tools.sh`, or
/// under `KBERG_TOOLS_DIR`); a test fails, saying so, without it.
pub fn python() -> PathBuf {
    let tools = std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let p = tools.join("venv/bin/python");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

/// A client script under `tests/clients`.
pub fn client_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// The next stdout line of a client starting with `prefix` (the rest of it), within a deadline.
pub async fn line_with(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            match lines.next_line().await.unwrap() {
                Some(l) if l.starts_with(prefix) => return l[prefix.len()..].trim().to_string(),
                Some(_) => continue,
                None => panic!("the client ended before printing `{prefix}`; see its stderr"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no `{prefix}` line from the client"))
}
