//! Real coding-agent command lines register the gateway exactly as `bridle serve` tells a person
//! to, and see it connected: Claude Code (`@anthropic-ai/claude-code`) and Gemini CLI
//! (`@google/gemini-cli`), pinned in `tools/package.json` and installed into `.tools/` by
//! `scripts/install-tools.sh`.
//!
//! Each test starts `bridle serve` on an empty data directory (whose path holds a space, so the
//! printed command's quoting is exercised), takes the agent's one-liner from what the gateway
//! printed and runs it with `sh -c` in a fresh home directory, changing only the program to the
//! pinned binary. Both CLIs' `mcp list` then connect to every registered server themselves
//! (initialize over Streamable HTTP on loopback; no model, no API key, no other network), so the
//! gateway must report connected, and a second entry with a wrong token must show the CLI's own
//! refusal. Every child runs under a deadline in its own process group and is stopped by pid
//! when the test fails.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod bridle_support;
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bridle_support::Server;
use common::{ClientRun, run_command, tool, tools_dir};
use tokio::process::Command;

/// A generous bound for one CLI command on a loaded two-core machine (they take well under ten
/// seconds here).
const CLI_DEADLINE: Duration = Duration::from_secs(120);

/// A token the gateway never issued.
const WRONG_TOKEN: &str = "not-a-bridle-token-0000000000000000000000000000";

/// A started gateway and the connect help it printed on first start.
struct Gateway {
    server: Server,
    help: Vec<String>,
    _data: tempfile::TempDir,
}

impl Gateway {
    /// `bridle serve --listen 127.0.0.1:0` on an empty data directory, read up to the end of
    /// its connect help.
    fn start() -> Gateway {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("bridle data");
        let server = Server::start(&dir);
        let mut help = Vec::new();
        while !help
            .iter()
            .any(|l: &String| l.starts_with("Review proposals"))
        {
            match server.stdout.recv_timeout(kberg_testkit::WAIT) {
                Ok(line) => help.push(line),
                Err(e) => panic!(
                    "bridle serve stopped printing its connect help ({e}); so far:\n{}",
                    help.join("\n")
                ),
            }
        }
        Gateway {
            server,
            help,
            _data: data,
        }
    }

    /// The one-liner printed under the heading that starts with `heading`, as printed.
    fn one_liner(&self, heading: &str, program: &str) -> String {
        let at = self
            .help
            .iter()
            .position(|l| l.starts_with(heading))
            .unwrap_or_else(|| panic!("no `{heading}` in the connect help:\n{}", self.joined()));
        let line = self
            .help
            .get(at + 1)
            .unwrap_or_else(|| panic!("nothing under `{heading}`:\n{}", self.joined()));
        let command = line.trim_start();
        assert!(
            command.starts_with(&format!("{program} mcp add ")),
            "the line under `{heading}` is not a `{program} mcp add` command: {line}"
        );
        command.to_string()
    }

    fn joined(&self) -> String {
        self.help.join("\n")
    }
}

/// `text` as one single-quoted POSIX shell word.
fn sh_word(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A fresh home directory with a working folder in it, for one CLI.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        Home { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A command run in `~/work` with nothing of the caller's environment but what is set here:
    /// `HOME`, a `PATH` that puts the pinned Node 22 first (Gemini CLI starts with
    /// `#!/usr/bin/env node`), and the switches that keep both CLIs off the network.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let node_bin = tools_dir().join("node/bin");
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .current_dir(self.path().join("work"))
            .env("HOME", self.path())
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", node_bin.display()),
            )
            .env("LANG", "C.UTF-8")
            .env("NO_COLOR", "1")
            .env("CI", "1")
            // Claude Code: no auto-update, telemetry, error reports or other non-essential traffic.
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            // Gemini CLI: telemetry off (its settings file below turns off the rest).
            .env("GEMINI_TELEMETRY_ENABLED", "false");
        cmd
    }

    /// Runs the gateway's printed one-liner with `sh -c`, the leading program name replaced by
    /// the pinned binary.
    async fn run_one_liner(&self, one_liner: &str, program: &str, binary: &Path) -> ClientRun {
        let rest = one_liner
            .strip_prefix(program)
            .unwrap_or_else(|| panic!("`{one_liner}` does not start with `{program}`"));
        let script = format!("{}{rest}", sh_word(&binary.display().to_string()));
        let mut cmd = self.command("/bin/sh");
        cmd.arg("-c").arg(script);
        run_command(cmd, CLI_DEADLINE).await
    }

    /// Runs the pinned binary with `args`.
    async fn run(&self, binary: &Path, args: &[&str]) -> ClientRun {
        let mut cmd = self.command(binary);
        cmd.args(args);
        run_command(cmd, CLI_DEADLINE).await
    }
}

/// What a run printed, for assertions and failure messages.
fn printed(run: &ClientRun) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        run.code, run.stdout, run.stderr
    )
}

/// The line of `run`'s output (stdout, then stderr) that starts with `prefix`.
fn line_starting<'a>(run: &'a ClientRun, prefix: &str) -> Option<&'a str> {
    run.stdout
        .lines()
        .chain(run.stderr.lines())
        .map(str::trim)
        .find(|l| l.starts_with(prefix))
}

fn assert_succeeded(run: &ClientRun, what: &str) {
    assert_eq!(run.code, Some(0), "{what} failed:\n{}", printed(run));
}

fn claude_bin() -> PathBuf {
    tool("node/node_modules/@anthropic-ai/claude-code/bin/claude.exe")
}

fn gemini_bin() -> PathBuf {
    tool("node/node_modules/@google/gemini-cli/bundle/gemini.js")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_registers_the_printed_one_liner_and_reports_bridle_connected() {
    let claude = claude_bin();
    let gateway = Gateway::start();
    let url = gateway.server.url.clone();
    let one_liner = gateway.one_liner("Claude Code (agent `claude`)", "claude");
    let home = Home::new();

    let add = home.run_one_liner(&one_liner, "claude", &claude).await;
    assert_succeeded(&add, "the printed `claude mcp add`");
    assert!(
        add.stdout.contains("Added HTTP MCP server bridle"),
        "{}",
        printed(&add)
    );

    let list = home.run(&claude, &["mcp", "list"]).await;
    assert_succeeded(&list, "`claude mcp list`");
    let line = line_starting(&list, "bridle:")
        .unwrap_or_else(|| panic!("bridle is not listed:\n{}", printed(&list)));
    assert_eq!(
        line,
        format!("bridle: {url} (HTTP) - ✔ Connected"),
        "{}",
        printed(&list)
    );

    // A wrong token: Claude Code says the server refused its Authorization header with a 401.
    let add_wrong = home
        .run(
            &claude,
            &[
                "mcp",
                "add",
                "--scope",
                "user",
                "--transport",
                "http",
                "bridle-wrong",
                &url,
                "--header",
                &format!("Authorization: Bearer {WRONG_TOKEN}"),
            ],
        )
        .await;
    assert_succeeded(&add_wrong, "`claude mcp add bridle-wrong`");
    let list = home.run(&claude, &["mcp", "list"]).await;
    assert_succeeded(&list, "`claude mcp list`");
    let line = line_starting(&list, "bridle:")
        .unwrap_or_else(|| panic!("bridle is not listed:\n{}", printed(&list)));
    assert!(line.ends_with("✔ Connected"), "{}", printed(&list));
    let wrong = line_starting(&list, "bridle-wrong:")
        .unwrap_or_else(|| panic!("bridle-wrong is not listed:\n{}", printed(&list)));
    assert!(
        wrong.starts_with(&format!("bridle-wrong: {url} (HTTP) - ✘ Failed to connect")),
        "{}",
        printed(&list)
    );
    assert!(
        wrong.contains("Server rejected the configured Authorization header (HTTP 401)"),
        "{}",
        printed(&list)
    );
    // The gateway's own refusal, relayed: a stable code and a sentence, no token.
    assert!(wrong.contains("\"error\":\"invalid_token\""), "{wrong}");
    assert!(!list.stdout.contains(WRONG_TOKEN), "{}", printed(&list));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_registers_the_printed_one_liner_and_reports_bridle_connected() {
    let gemini = gemini_bin();
    let gateway = Gateway::start();
    let url = gateway.server.url.clone();
    let one_liner = gateway.one_liner("Gemini CLI (agent `gemini`)", "gemini");
    let home = Home::new();
    // Folder trust off (with it on, `mcp list` shows every server "Disabled" in a folder nobody
    // has trusted), and no update checks or usage statistics.
    std::fs::create_dir(home.path().join(".gemini")).unwrap();
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        r#"{
  "security": { "folderTrust": { "enabled": false } },
  "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false }
}
"#,
    )
    .unwrap();

    let add = home.run_one_liner(&one_liner, "gemini", &gemini).await;
    assert_succeeded(&add, "the printed `gemini mcp add`");
    assert!(
        line_starting(&add, "MCP server \"bridle\" added to user settings").is_some(),
        "{}",
        printed(&add)
    );

    let list = home.run(&gemini, &["mcp", "list"]).await;
    assert_succeeded(&list, "`gemini mcp list`");
    let line = line_starting(&list, "✓ bridle:")
        .unwrap_or_else(|| panic!("bridle is not listed connected:\n{}", printed(&list)));
    assert_eq!(
        line,
        format!("✓ bridle: {url} (http) - Connected"),
        "{}",
        printed(&list)
    );

    // A wrong token: Gemini CLI's `mcp list` drops the error's detail and reports the server
    // disconnected, beside the right one connected on the same gateway in the same run.
    let add_wrong = home
        .run(
            &gemini,
            &[
                "mcp",
                "add",
                "--scope",
                "user",
                "--transport",
                "http",
                "bridle-wrong",
                &url,
                "--header",
                &format!("Authorization: Bearer {WRONG_TOKEN}"),
            ],
        )
        .await;
    assert_succeeded(&add_wrong, "`gemini mcp add bridle-wrong`");
    let list = home.run(&gemini, &["mcp", "list"]).await;
    assert_succeeded(&list, "`gemini mcp list`");
    assert!(
        line_starting(&list, &format!("✓ bridle: {url} (http) - Connected")).is_some(),
        "{}",
        printed(&list)
    );
    assert!(
        line_starting(
            &list,
            &format!("✗ bridle-wrong: {url} (http) - Disconnected")
        )
        .is_some(),
        "{}",
        printed(&list)
    );
    assert!(!list.stdout.contains(WRONG_TOKEN), "{}", printed(&list));
}
