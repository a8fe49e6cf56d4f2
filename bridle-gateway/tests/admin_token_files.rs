//! Admin token files (`--admin-token-file`, a Docker secret; a file of `name token` lines) are
//! read no further than any such file can be: one that never ends (a pipe, a device given by
//! mistake) is refused instead of holding the start forever.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.
#![cfg(unix)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use bridle_gateway::admin::AdminTokens;
use bridle_gateway::admin::credential::admin_from_file;

/// Runs `load` on a pipe that sends far more than any token file holds and then stays open,
/// and answers whether `load` refused it (`None`: it did not finish).
fn refuses_endless<T: Send + 'static>(
    load: impl FnOnce(&Path) -> Result<T, String> + Send + 'static,
) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let fifo: PathBuf = dir.path().join("endless");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let (stop, stopped) = mpsc::channel::<()>();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let line = format!("alice {}\n", "t".repeat(60));
            let chunk = line.repeat(1024);
            for _ in 0..64 {
                if pipe.write_all(chunk.as_bytes()).is_err() {
                    break;
                }
            }
            let _ = stopped.recv();
        })
    };
    let (answer, answered) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _ = answer.send(load(&fifo).err());
    });
    let outcome = answered.recv_timeout(Duration::from_secs(60));
    let _ = stop.send(());
    writer.join().unwrap();
    reader.join().unwrap();
    outcome.ok().flatten()
}

#[test]
fn an_admin_token_file_that_never_ends_is_refused() {
    let refused = refuses_endless(|p| admin_from_file("ops", p).map_err(|e| e.to_string()))
        .expect("refused without waiting for the file to end");
    assert!(refused.contains("longer than"), "{refused}");
    assert!(
        !refused.contains("tttttttt"),
        "no token in the message: {refused}"
    );
}

#[test]
fn an_admin_tokens_list_that_never_ends_is_refused() {
    let refused = refuses_endless(|p| AdminTokens::from_file(p).map_err(|e| e.to_string()))
        .expect("refused without waiting for the file to end");
    assert!(refused.contains("longer than"), "{refused}");
}
