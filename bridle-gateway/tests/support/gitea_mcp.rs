//! The pinned third-party Gitea MCP server (`gitea-mcp` 0.5.1, a Python FastMCP server that
//! `scripts/install-tools.sh` installs into `.tools/gitea-mcp-venv`, `KBERG_TOOLS_DIR` overrides
//! the folder) and the environment it runs with. It reads `GITEA_URL` and `GITEA_TOKEN` once at
//! start and sends `Authorization: token <GITEA_TOKEN>` on every request; without a token it
//! refuses to start. `FASTMCP_CHECK_FOR_UPDATES=off` keeps it offline (otherwise FastMCP asks the
//! package index for a newer version while it prints its start banner on stderr), and
//! `FASTMCP_LOG_LEVEL=CRITICAL` keeps failed calls out of its stderr: FastMCP logs each with its
//! exception, which quotes Gitea's answer, which quotes a rejected token.

use std::path::PathBuf;

use kberg_server::aggregate::UpstreamTransport;

/// The folder of the pinned test peers.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

/// The `gitea-mcp` command, failing with what to run when it is missing.
pub fn program() -> String {
    let p = tools_dir().join("gitea-mcp-venv/bin/gitea-mcp");
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-tools.sh",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// The environment of one `gitea-mcp` child: the Gitea at `url`, acting with `token`.
pub fn env(url: &str, token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GITEA_URL", url.to_owned()),
        ("GITEA_TOKEN", token.to_owned()),
        ("FASTMCP_CHECK_FOR_UPDATES", "off".to_owned()),
        ("FASTMCP_LOG_LEVEL", "CRITICAL".to_owned()),
    ]
}

/// `gitea-mcp` as a stdio upstream of Kberg's aggregator.
pub fn stdio(url: &str, token: &str) -> UpstreamTransport {
    env(url, token)
        .into_iter()
        .fold(UpstreamTransport::stdio(program()), |t, (k, v)| t.env(k, v))
}

/// `gitea-mcp` as a command, for an MCP client that spawns it itself.
pub fn command(url: &str, token: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program());
    cmd.envs(env(url, token)).kill_on_drop(true);
    cmd
}
