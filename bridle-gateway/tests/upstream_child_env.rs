//! A stdio upstream starts with a cleared environment: of the gateway's own variables it gets
//! only the allowed ones (`INHERITED_ENV`) and those its `inherit_env` names, plus its
//! configured `env` and its credential. An operator who exported `BRIDLE_ADMIN_TOKEN` or
//! `BRIDLE_MASTER_KEY` before starting the gateway hands them to no child, and a child that
//! prints its environment prints neither.
//!
//! A test cannot change its own process's environment safely (the workspace forbids `unsafe`,
//! which `std::env::set_var` is), so the outer test runs the gateway in a second run of this
//! test binary, started with those variables exported, and checks that run passed. The child
//! is `awk` printing every variable it has to stderr, which the gateway logs line by line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::collections::BTreeSet;
use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::upstreams::config::INHERITED_ENV;
use bridle_rules::{AgentCatalog, RulesStore};
use kberg_testkit::log::LogBuffer;

const ADMIN_CANARY: &str = "canary-admin-token-4Hq9Lm";
const MASTER_CANARY: &str = "canary-master-key-8Vc2Rt";
/// A variable of the gateway's environment that the upstream's `inherit_env` names.
const NAMED: &str = "UPSTREAM_TEST_NAMED_FOR_CHILD";
const NAMED_VALUE: &str = "named-for-the-child";
/// The upstream's credential, carried in its environment.
const TOKEN: &str = "canary-upstream-token-2Pw7Xs";
/// The test the outer test runs in a second process.
const INNER: &str = "gateway_run_with_secrets_exported";

#[test]
fn a_stdio_upstream_gets_only_the_allowed_environment() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([INNER, "--exact", "--include-ignored", "--test-threads=1"])
        .env("BRIDLE_ADMIN_TOKEN", ADMIN_CANARY)
        .env("BRIDLE_MASTER_KEY", MASTER_CANARY)
        .env(
            "BRIDLE_MASTER_KEY_FILE",
            "/run/secrets/canary-master-key-file",
        )
        .env(NAMED, NAMED_VALUE)
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the gateway run failed:\n{said}");
    assert!(
        said.contains(&format!("test {INNER} ... ok")) && said.contains("1 passed"),
        "the gateway run did not run its test:\n{said}"
    );
}

fn data_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    // awk itself, not a shell, which would add variables of its own (`PWD`, `SHLVL`).
    let program = "BEGIN { for (k in ENVIRON) print \"child env: \" k \"=\" ENVIRON[k] > \"/dev/stderr\"; \
                   print \"child env end\" > \"/dev/stderr\" }";
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(&format!(
        "upstreams:\n  envdump:\n    stdio:\n      command: awk\n      args: [{program:?}]\n      env: {{CONFIGURED_SETTING: configured-value}}\n      inherit_env: [{NAMED}]\n    credential: {{secret: envdump-token, env: UPSTREAM_TOKEN}}\n"
    ));
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    std::fs::write(tmp.path().join("secrets/envdump-token"), TOKEN).unwrap();
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &demo_document(), "test")
        .unwrap();
    tmp
}

/// The names the child printed.
fn child_names(log: &str) -> BTreeSet<String> {
    log.lines()
        .filter_map(|l| l.split_once("child env: ").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('=').map(|(name, _)| name.to_string()))
        .collect()
}

fn own_env() -> BTreeSet<String> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_stdio_upstream_gets_only_the_allowed_environment, in a process with secrets exported"]
async fn gateway_run_with_secrets_exported() {
    // This process runs only this test: the log is every thread's.
    let logs = LogBuffer::default();
    logs.install_global(bridle_gateway::logging::log_targets("info"));
    let tmp = data_dir();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let log = logs.wait_for("child env end").await;
    gateway.upstreams().shutdown().await;
    check(&log);
}

fn check(log: &str) {
    let seen = child_names(log);
    let parent = own_env();
    assert!(
        parent.contains("BRIDLE_ADMIN_TOKEN") && parent.contains("BRIDLE_MASTER_KEY"),
        "run this test through a_stdio_upstream_gets_only_the_allowed_environment"
    );
    // Configured, credential, named and allowed variables are there.
    for name in ["CONFIGURED_SETTING", "UPSTREAM_TOKEN", NAMED, "LANG"] {
        assert!(seen.contains(name), "`{name}` is missing: {seen:?}");
    }
    if parent.contains("PATH") {
        assert!(seen.contains("PATH"), "{seen:?}");
    }
    // Nothing else of the gateway's environment is.
    let leaked: Vec<&String> = parent
        .iter()
        .filter(|n| seen.contains(*n))
        .filter(|n| !INHERITED_ENV.contains(&n.as_str()) && *n != NAMED)
        .collect();
    assert!(
        leaked.is_empty(),
        "the child inherited variables it was not given: {leaked:?}"
    );
    for canary in [ADMIN_CANARY, MASTER_CANARY, "canary-master-key-file", TOKEN] {
        assert!(!log.contains(canary), "`{canary}` reached the log:\n{log}");
    }
    assert!(log.contains("UPSTREAM_TOKEN=[redacted]"), "{log}");
    assert!(log.contains(NAMED_VALUE), "{log}");
}
