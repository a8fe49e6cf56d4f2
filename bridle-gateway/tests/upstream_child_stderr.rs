//! A stdio upstream's standard error is logged with its credential redacted, also when the
//! credential was stored with trailing blanks (a token pasted with the space or tab after it;
//! the vault keeps a value as given) and the child prints it without them, as a shell's word
//! splitting or a program's own trim does. The child is `sh` printing its token variable
//! unquoted to stderr and exiting; the gateway logs the line, and retries.

#![cfg(unix)] // The child is `/bin/sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;
use std::time::Duration;

use admin_support::gateway::Gw;
use bridle_gateway::upstreams::{Credential, SecretError, SecretSource, SecretUse};
use kberg_testkit::log::LogBuffer;

/// The stored value: the canary with trailing blanks.
const PADDED: &str = "canary-child-token-5Jd8 \t";

/// A secret source with [`PADDED`] as every secret.
struct Padded;

impl SecretSource for Padded {
    fn version(&self, _name: &str) -> Result<u64, SecretError> {
        Ok(1)
    }
    fn current(&self, _name: &str) -> Result<(Credential, u64), SecretError> {
        Ok((Credential::new(PADDED), 1))
    }
    fn record_use(&self, _used: &SecretUse<'_>) -> Result<(), SecretError> {
        Ok(())
    }
    fn blocks(&self, _name: &str) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_stored_with_trailing_blanks_is_redacted_from_the_childs_stderr() {
    let logs = LogBuffer::default();
    logs.install_global(bridle_gateway::logging::log_targets("info"));
    let yaml = "upstreams:\n  child:\n    stdio:\n      command: /bin/sh\n      args: ['-c', 'echo child-said token=$UPSTREAM_TOKEN end >&2; exit 3']\n    credential: {secret: padded, env: UPSTREAM_TOKEN}\n";
    let gw = Gw::start_with_yaml(yaml, |b| {
        b.secrets(Arc::new(Padded))
            .connect_timeout(Duration::from_secs(3))
    })
    .await;
    let text = logs.wait_for("child-said").await;
    let line = text
        .lines()
        .find(|l| l.contains("child-said"))
        .unwrap()
        .to_string();
    assert!(line.contains("[redacted]"), "{line}");
    assert!(
        !text.contains(PADDED.trim()),
        "the log holds the token:\n{text}"
    );
    gw.stop().await;
}
