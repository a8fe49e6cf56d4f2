//! A read-only secret source (`docker:`, `file:`) is read no further than the largest value
//! the vault takes: a file that is far larger, or never ends (a pipe, a device linked in by
//! mistake), is refused `invalid_value` once the limit is passed, not read whole into memory. The
//! master key file likewise: one that never ends is refused `master_key_invalid`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.
#![cfg(unix)]

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use bridle_gateway::vault::{MAX_VALUE_LEN, SecretRef, VaultConfig};

#[test]
fn a_source_that_never_ends_is_refused_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("endless");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    // The writer sends many times the limit and then holds the pipe open, as a source that
    // never ends does, until the test is over.
    let (stop, stopped) = mpsc::channel::<()>();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..(16 * MAX_VALUE_LEN / chunk.len()) {
                if pipe.write_all(&chunk).is_err() {
                    break; // the reader stopped reading: what is wanted
                }
            }
            let _ = stopped.recv();
        })
    };
    let config = VaultConfig {
        docker_secrets_dir: dir.path().to_path_buf(),
        secrets_dir: None,
    };
    let (answer, answered) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let read = config.read_source(&SecretRef::Docker("endless".into()));
        let _ = answer.send(read.map(|v| v.len()).map_err(|e| e.code()));
    });
    let outcome = answered.recv_timeout(Duration::from_secs(60));
    // Whatever happened, let both threads end.
    let _ = stop.send(());
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(
        outcome.expect("the read ends without waiting for the source to end"),
        Err("invalid_value")
    );
}

#[test]
fn a_master_key_file_that_never_ends_is_refused() {
    use bridle_gateway::vault::MasterKey;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("bridle_master_key");
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
            let chunk = vec![b'k'; 64 * 1024];
            for _ in 0..64 {
                if pipe.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = stopped.recv();
        })
    };
    let (answer, answered) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _ = answer.send(MasterKey::load(&fifo).map(drop).map_err(|e| e.code()));
    });
    let outcome = answered.recv_timeout(Duration::from_secs(60));
    let _ = stop.send(());
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(
        outcome.expect("the read ends without waiting for the file to end"),
        Err("master_key_invalid")
    );
}
