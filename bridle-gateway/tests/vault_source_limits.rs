//! A read-only secret source (`docker:`, `file:`) is read no further than the largest value
//! the vault takes: a file far larger is refused `invalid_value` once the limit is passed, not
//! read whole into memory. A pipe or a device linked in by mistake is refused
//! `source_unreadable` without being opened: opening a pipe waits for a writer, which may never
//! come. The master key file, which may be given as a pipe, is read to a bound instead: one that
//! never ends is refused `master_key_invalid`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.
#![cfg(unix)]

#[path = "common/endless_pipe.rs"]
mod endless_pipe;

use std::path::Path;

use bridle_gateway::vault::{MAX_VALUE_LEN, SecretRef, VaultConfig};
use endless_pipe::read_endless;

fn docker_source(dir: &Path) -> VaultConfig {
    VaultConfig {
        docker_secrets_dir: dir.to_path_buf(),
        secrets_dir: None,
    }
}

#[test]
fn a_source_far_larger_than_any_value_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("huge"), vec![b'x'; 16 * MAX_VALUE_LEN]).unwrap();
    let read = docker_source(dir.path()).read_source(&SecretRef::Docker("huge".into()));
    assert_eq!(
        read.map(|v| v.len()).map_err(|e| e.code()),
        Err("invalid_value")
    );
}

#[test]
fn a_source_that_is_a_pipe_is_refused_without_reading_it() {
    let chunk = vec![b'x'; 64 * 1024];
    let times = 16 * MAX_VALUE_LEN / chunk.len();
    let outcome = read_endless("endless", chunk, times, |pipe| {
        docker_source(pipe.parent().expect("a folder"))
            .read_source(&SecretRef::Docker("endless".into()))
            .map(|v| v.len())
            .map_err(|e| e.code())
    });
    assert_eq!(
        outcome.expect("the read ends without waiting for the source to end"),
        Err("source_unreadable")
    );
}

/// Before, the source was opened as any file: opening a pipe that no one writes waits for a
/// writer, and the read never returned.
#[test]
fn a_source_that_is_a_pipe_without_a_writer_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    endless_pipe::make_pipe(dir.path(), "nobody_writes");
    let config = docker_source(dir.path());
    let (answer, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = config.read_source(&SecretRef::Docker("nobody_writes".into()));
        let _ = answer.send(read.map(|v| v.len()).map_err(|e| (e.code(), e.to_string())));
    });
    let (code, message) = answered
        .recv_timeout(kberg_testkit::WAIT)
        .expect("answered without waiting for a writer")
        .expect_err("refused");
    assert_eq!(code, "source_unreadable");
    assert!(message.contains("nobody_writes"), "{message}");
}

#[test]
fn a_master_key_file_that_never_ends_is_refused() {
    use bridle_gateway::vault::MasterKey;
    let outcome = read_endless("bridle_master_key", vec![b'k'; 64 * 1024], 64, |pipe| {
        MasterKey::load(pipe).map(drop).map_err(|e| e.code())
    });
    assert_eq!(
        outcome.expect("the read ends without waiting for the file to end"),
        Err("master_key_invalid")
    );
}
