//! The official MCP conformance suite (`@modelcontextprotocol/conformance@0.2.0-alpha.12`,
//! pinned in `tools/package.json`) in server mode against the `kberg-conformance` binary, once
//! per protocol revision, through `scripts/conformance.sh` (which starts the binary on a free
//! loopback port, runs `conformance server --requirements REV`, and stops it by pid).
//!
//! Every scored scenario must pass: 30 for 2025-11-25, 37 for 2026-07-28. Needs
//! `scripts/install-tools.sh` (or `KBERG_TOOLS_DIR`) and `bash`.

mod common;

use std::time::Duration;

use common::{repo_root, run_client, tool, tools_dir};

async fn run_suite(revision: &str, scored: usize) {
    tool("node/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let out =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("conformance-{revision}"));
    let script = repo_root().join("scripts/conformance.sh");
    let run = run_client(
        "/usr/bin/env".into(),
        vec![
            format!(
                "KBERG_CONFORMANCE_BIN={}",
                env!("CARGO_BIN_EXE_kberg-conformance")
            ),
            format!("KBERG_TOOLS_DIR={}", tools_dir().display()),
            format!("KBERG_CONFORMANCE_OUT={}", out.display()),
            "bash".into(),
            script.display().to_string(),
            "--no-build".into(),
            revision.into(),
        ],
        Duration::from_secs(600),
    )
    .await;
    let report = format!("--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
    let want = format!("== {revision}: {scored}/{scored} scored scenarios passed");
    assert!(run.stdout.contains(&want), "expected `{want}`:\n{report}");
    assert_eq!(run.code, Some(0), "the conformance run failed:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_2025_11_25_every_scored_scenario_passes() {
    run_suite("2025-11-25", 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_2026_07_28_every_scored_scenario_passes() {
    run_suite("2026-07-28", 37).await;
}
