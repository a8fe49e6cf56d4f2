//! A read-only secret source (`docker:`, `file:`) is read no further than the largest value
//! the vault takes: a file that is far larger, or never ends (a pipe, a device linked in by
//! mistake), is refused `invalid_value` once the limit is passed, not read whole into memory. The
//! master key file likewise: one that never ends is refused `master_key_invalid`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.
#![cfg(unix)]

#[path = "common/endless_pipe.rs"]
mod endless_pipe;

use bridle_gateway::vault::{MAX_VALUE_LEN, SecretRef, VaultConfig};
use endless_pipe::read_endless;

#[test]
fn a_source_that_never_ends_is_refused_at_the_limit() {
    let chunk = vec![b'x'; 64 * 1024];
    let times = 16 * MAX_VALUE_LEN / chunk.len();
    let outcome = read_endless("endless", chunk, times, |pipe| {
        let config = VaultConfig {
            docker_secrets_dir: pipe.parent().expect("a folder").to_path_buf(),
            secrets_dir: None,
        };
        config
            .read_source(&SecretRef::Docker("endless".into()))
            .map(|v| v.len())
            .map_err(|e| e.code())
    });
    assert_eq!(
        outcome.expect("the read ends without waiting for the source to end"),
        Err("invalid_value")
    );
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
