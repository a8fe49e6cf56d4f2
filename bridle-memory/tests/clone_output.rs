//! What git writes while cloning an example repository is read to a bound: a remote can send
//! any amount of `remote: ...` text (git prints it whatever `--quiet` asked), and only the last
//! line is shown. The test runs its clone in a child process whose `git` is a stand-in that
//! writes 384 MiB before its last line, and the child checks its own peak memory.

use std::time::Duration;

use bridle_memory::repo::fetch;

const CHILD_ENV: &str = "BRIDLE_MEMORY_NOISY_GIT_CHILD";

/// The process's peak resident memory, in KiB (`VmHWM` of `/proc/self/status`).
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// The clone the parent test starts with the noisy `git` first on its `PATH`.
#[test]
#[ignore = "started by a_clone_that_writes_without_end_keeps_only_its_last_line"]
fn noisy_git_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let before = peak_kib();
    let err = rt
        .block_on(fetch(
            "https://git.example.invalid/team/app.git",
            Duration::from_secs(300),
        ))
        .expect_err("the stand-in fails");
    let shown = err.to_string();
    assert!(
        shown.contains("fatal: the last line"),
        "{}",
        shown.chars().take(300).collect::<String>()
    );
    let grown = peak_kib().saturating_sub(before);
    assert!(
        grown < 64 * 1024,
        "reading git's output grew the peak memory by {grown} KiB"
    );
}

#[test]
fn a_clone_that_writes_without_end_keeps_only_its_last_line() {
    let bin = tempfile::tempdir().expect("temp dir");
    let git = bin.path().join("git");
    std::fs::write(
        &git,
        "#!/bin/sh\n{ head -c 402653184 /dev/zero | tr '\\000' 'r'; echo; echo 'fatal: the last line'; } >&2\nexit 128\n",
    )
    .expect("write the stand-in");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "noisy_git_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env("PATH", path)
        .output()
        .expect("run the child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr)
    );
}
