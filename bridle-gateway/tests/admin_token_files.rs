//! Admin token files (`--admin-token-file`, a Docker secret; a file of `name token` lines) are
//! read no further than any such file can be: one that never ends (a pipe, a device given by
//! mistake) is refused instead of holding the start forever.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.
#![cfg(unix)]

#[path = "common/endless_pipe.rs"]
mod endless_pipe;

use std::path::Path;

use bridle_gateway::admin::AdminTokens;
use bridle_gateway::admin::credential::admin_from_file;

/// Runs `load` on a pipe that sends far more than any token file holds and then stays open,
/// and answers whether `load` refused it (`None`: it did not finish, or did not refuse).
fn refuses_endless<T: Send + 'static>(
    load: impl FnOnce(&Path) -> Result<T, String> + Send + 'static,
) -> Option<String> {
    let line = format!("alice {}\n", "t".repeat(60));
    endless_pipe::read_endless("endless", line.repeat(1024).into_bytes(), 64, |pipe| {
        load(pipe).err()
    })
    .flatten()
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
