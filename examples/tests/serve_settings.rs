//! Settings at the edge of a real `bridle` process: command-line flags win over environment
//! variables, which win over `bridle.yaml` (`BRIDLE_LISTEN`, `BRIDLE_DATA_DIR`,
//! `BRIDLE_MASTER_KEY_FILE`, ...); a bad setting stops the process with a message naming it;
//! and every variable `compose.yaml` hands the gateway is one it reads.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The variables the `bridle` binary reads itself (the rest are the gateway library's
/// `EDGE_VARIABLES`).
const BINARY_VARIABLES: &[&str] = &[
    "BRIDLE_DATA_DIR",
    "BRIDLE_LOG",
    "BRIDLE_LOG_FORMAT",
    "BRIDLE_LOG_PANIC_MESSAGES",
];

fn bridle(dir: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bridle"));
    c.arg("--data-dir").arg(dir).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    for (k, _) in bridle_gateway::edge::EDGE_VARIABLES {
        if !env.iter().any(|(e, _)| e == k) {
            c.env_remove(k);
        }
    }
    c
}

/// Killed by pid when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `bridle serve ARGS` and returns it with the URL it announced.
fn serve(mut cmd: Command, args: &[&str]) -> (Reaped, String) {
    cmd.arg("serve").args(args).stderr(Stdio::inherit());
    let (child, url, _stdout) = bridle_support::spawn_announced(&mut cmd);
    (Reaped(child), url)
}

fn port(url: &str) -> u16 {
    url.trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap()
}

#[test]
fn the_flag_beats_the_environment_which_beats_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        bridle(tmp.path(), &[])
            .arg("init")
            .output()
            .unwrap()
            .status
            .success()
    );
    // bridle.yaml says 7878; the environment says a port this test holds.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let held_port = held.local_addr().unwrap().port();
    let free = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let env_listen = format!("127.0.0.1:{free}");
    // The admin API would take the port after `free`, which another process may hold.
    let (_s, url) = serve(
        bridle(tmp.path(), &[("BRIDLE_LISTEN", &env_listen)]),
        &["--admin-listen", "127.0.0.1:0"],
    );
    assert_eq!(port(&url), free, "the environment wins over bridle.yaml");
    drop(_s);

    let env_listen = format!("127.0.0.1:{held_port}");
    let (_s, url) = serve(
        bridle(tmp.path(), &[("BRIDLE_LISTEN", &env_listen)]),
        &["--listen", "127.0.0.1:0"],
    );
    assert_ne!(port(&url), held_port, "the flag wins over the environment");
    assert_ne!(port(&url), 7878);
}

#[test]
fn the_data_dir_flag_beats_bridle_data_dir() {
    let flag = tempfile::tempdir().unwrap();
    let env = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bridle"));
    cmd.arg("init").env("BRIDLE_DATA_DIR", env.path());
    assert!(cmd.output().unwrap().status.success());
    assert!(
        env.path().join("bridle.yaml").is_file(),
        "BRIDLE_DATA_DIR is used"
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bridle"));
    cmd.arg("--data-dir")
        .arg(flag.path().join("d"))
        .arg("init")
        .env("BRIDLE_DATA_DIR", env.path().join("other"));
    assert!(cmd.output().unwrap().status.success());
    assert!(flag.path().join("d/bridle.yaml").is_file());
    assert!(!env.path().join("other").exists(), "--data-dir wins");
}

#[test]
fn the_master_key_comes_from_the_named_file() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("bridle_master_key");
    std::fs::write(&key, format!("{}\n", "ab".repeat(32))).unwrap();
    let key_env = key.display().to_string();
    let (s, _url) = serve(
        bridle(tmp.path(), &[("BRIDLE_MASTER_KEY_FILE", &key_env)]),
        &["--listen", "127.0.0.1:0"],
    );
    drop(s);
    assert!(tmp.path().join("vault.db").is_file());
    assert!(
        !tmp.path().join("vault.key").exists(),
        "no key is created in the data directory when one is named"
    );
    // The same vault opens again only with the same key.
    std::fs::write(&key, "cd".repeat(32)).unwrap();
    let out = bridle(tmp.path(), &[("BRIDLE_MASTER_KEY_FILE", &key_env)])
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a wrong key does not open the vault");
}

#[test]
fn bad_settings_stop_the_process_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        bridle(tmp.path(), &[])
            .arg("init")
            .output()
            .unwrap()
            .status
            .success()
    );
    let missing = tmp.path().join("no-such-key").display().to_string();
    for (env, needle) in [
        (
            vec![("BRIDLE_MASTER_KEY_FILE", missing.as_str())],
            "no-such-key",
        ),
        (
            vec![("QDRANT_URL", "http://qdrant:6334")],
            "QDRANT_URL is set",
        ),
        (vec![("BRIDLE_LISTEN", "0.0.0.0:7878")], "allowed_hosts"),
        (vec![("BRIDLE_LOG_FORMAT", "yaml")], "BRIDLE_LOG_FORMAT"),
        (
            vec![("BRIDLE_ADMIN_BEHIND_TLS", "maybe")],
            "BRIDLE_ADMIN_BEHIND_TLS is `maybe`",
        ),
    ] {
        let out = bridle(tmp.path(), &env).arg("serve").output().unwrap();
        assert!(!out.status.success(), "{env:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{env:?}: {err}");
    }
}

/// The `environment:` keys of every service in `compose.yaml` that runs the gateway image.
fn compose_gateway_variables() -> Vec<String> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../compose.yaml"))
            .expect("compose.yaml at the repository root");
    let mut vars = Vec::new();
    let mut in_gateway = false;
    let mut in_env = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if indent == 2 && t.ends_with(':') {
            in_gateway = t == "gateway:";
            in_env = false;
            continue;
        }
        if in_gateway && indent == 4 {
            in_env = t == "environment:";
            continue;
        }
        if in_gateway
            && in_env
            && indent == 6
            && let Some((k, _)) = t.split_once(':')
        {
            vars.push(k.trim().to_string());
        }
    }
    vars
}

#[test]
fn compose_hands_the_gateway_only_variables_it_reads() {
    let vars = compose_gateway_variables();
    assert!(
        vars.len() >= 5,
        "compose.yaml's gateway environment: {vars:?}"
    );
    let known: Vec<&str> = bridle_gateway::edge::EDGE_VARIABLES
        .iter()
        .map(|(k, _)| *k)
        .chain(BINARY_VARIABLES.iter().copied())
        .collect();
    for v in &vars {
        assert!(
            known.contains(&v.as_str()),
            "compose.yaml sets {v}, which bridle does not read"
        );
        assert!(
            v.ends_with("_FILE")
                || (!v.contains("TOKEN") && !v.contains("PASSWORD") && v != "BRIDLE_MASTER_KEY"),
            "{v}: secrets are Docker secrets (files, named by `*_FILE` variables), never environment variables"
        );
    }
}
