//! Where upstream credentials come from: the [`SecretSource`] trait the gateway's vault
//! implements, a [`FolderSecrets`] source over a Docker-secrets-style folder, and
//! [`Credential`], a secret value that never prints.
//!
//! The upstream routes ask the source for a secret's *version* on every forwarded call (cheap)
//! and for its value only when they (re)connect, so a rotation reaches the next call without the
//! value being read on the hot path.

use std::path::PathBuf;

use crate::vault::shown_name;

/// A secret value. It prints and debugs as `[redacted]`; [`Credential::expose`] is the one way
/// to read it, and the memory is wiped when it is dropped.
#[derive(Clone)]
pub struct Credential(zeroize::Zeroizing<String>);

impl Credential {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(zeroize::Zeroizing::new(value.into()))
    }

    /// The value, for the one place that injects it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a secret could not be had. Messages name the secret, never its value; a name that does
/// not look like one (a credential pasted in its place) is described, not quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// No such secret (or it has no usable version).
    #[error("secret {} does not exist", shown_name(.name))]
    Missing {
        /// The secret's name.
        name: String,
    },
    /// The secret exists but is empty.
    #[error("secret {} is empty", shown_name(.name))]
    Empty {
        /// The secret's name.
        name: String,
    },
    /// The source failed.
    #[error("secret {} could not be read: {message}", shown_name(.name))]
    Unreadable {
        /// The secret's name.
        name: String,
        /// Why (never the value).
        message: String,
    },
}

/// One use of a secret in an injected request, for the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretUse<'a> {
    /// The secret's name.
    pub name: &'a str,
    /// The version used.
    pub version: u64,
    /// The upstream it was sent to.
    pub upstream: &'a str,
    /// The agent whose call it was.
    pub agent: &'a str,
    /// The request it went with (the forwarded tool).
    pub request: &'a str,
}

/// A source of named secrets with versions: the vault, or a folder of files.
pub trait SecretSource: Send + Sync {
    /// The active version of `name`. Called on every forwarded call; must be cheap.
    fn version(&self, name: &str) -> Result<u64, SecretError>;
    /// The active value of `name` and its version.
    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError>;
    /// Records a use. A source that cannot record fails the call (the request is not sent).
    fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError>;
    /// Records several uses, one outcome each, in order. The default records them one by one;
    /// a source with a database records them in one transaction (the vault: one commit for the
    /// batch), which is what the gateway's secret desk calls under load.
    fn record_uses(&self, uses: &[SecretUse<'_>]) -> Vec<Result<(), SecretError>> {
        uses.iter().map(|used| self.record_use(used)).collect()
    }
    /// Whether looking up or recording `name` may wait on a database or the network (the
    /// default). The gateway's secret desk runs such calls on the blocking pool and batches
    /// their uses; a source that answers from a file's metadata and records nothing says
    /// `false`, and is called inline (a thread hop would cost more than the call).
    fn blocks(&self, name: &str) -> bool {
        let _ = name;
        true
    }
}

/// Secrets as files in a folder (the legacy `secrets/` folder, or `/run/secrets`): a file's
/// trimmed content is the value; its modification time and length are its version. Uses are
/// logged at `debug` (names and versions only); a folder has nowhere to keep a record.
#[derive(Debug, Clone)]
pub struct FolderSecrets {
    dir: PathBuf,
}

impl FolderSecrets {
    /// Secrets in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path(&self, name: &str) -> Result<PathBuf, SecretError> {
        // Docker secret names are often upper case (`GITEA_TOKEN`); anything that could leave
        // the folder is refused.
        let ok = !name.is_empty()
            && name.len() <= 128
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(SecretError::Unreadable {
                name: name.to_string(),
                message: "a secret name is 1 to 128 letters, digits, `-`, `_` or `.`, not starting with `.`".into(),
            });
        }
        Ok(self.dir.join(name))
    }
}

impl FolderSecrets {
    /// The file of `name` and what `stat` says of it (following a link, as Docker and
    /// Kubernetes mount secrets).
    fn stat(&self, name: &str) -> Result<(PathBuf, std::fs::Metadata), SecretError> {
        let path = self.path(name)?;
        let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SecretError::Missing { name: name.into() },
            _ => SecretError::Unreadable {
                name: name.into(),
                message: e.to_string(),
            },
        })?;
        Ok((path, meta))
    }
}

/// A file's version: its modification time and length.
fn version_of(meta: &std::fs::Metadata) -> u64 {
    let nanos = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ meta.len().rotate_left(48)
}

impl SecretSource for FolderSecrets {
    fn version(&self, name: &str) -> Result<u64, SecretError> {
        self.stat(name).map(|(_, meta)| version_of(&meta))
    }

    /// The file's content, less surrounding whitespace. Only a regular file (or a link to one)
    /// is read, and no further than [`MAX_VALUE_LEN`](crate::vault::MAX_VALUE_LEN) and a line
    /// break: the folder is read on the async runtime, so a pipe or a device (a mount gone
    /// wrong) must not hold a worker waiting for a writer or an end, and a file far larger
    /// than any secret is refused without being read whole.
    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        use crate::vault::source::{FileProblem, MAX_FILE_READ, read_bounded};
        let most = crate::vault::MAX_VALUE_LEN;
        let unreadable = |message: String| SecretError::Unreadable {
            name: name.into(),
            message,
        };
        let (raw, meta) = read_bounded(&self.path(name)?).map_err(|e| match e {
            FileProblem::Missing => SecretError::Missing { name: name.into() },
            other => unreadable(other.into_io().to_string()),
        })?;
        let text =
            std::str::from_utf8(&raw).map_err(|_| unreadable("it is not UTF-8 text".into()))?;
        let value = text.trim();
        if value.is_empty() {
            return Err(SecretError::Empty { name: name.into() });
        }
        if raw.len() >= MAX_FILE_READ || value.len() > most {
            return Err(unreadable(format!("it holds more than {most} bytes")));
        }
        Ok((Credential::new(value), version_of(&meta)))
    }

    fn blocks(&self, _name: &str) -> bool {
        false
    }

    fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
        tracing::debug!(
            secret = used.name,
            version = used.version,
            upstream = used.upstream,
            agent = used.agent,
            request = used.request,
            "secret used"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_credential_never_prints() {
        let c = Credential::new("canary-value");
        assert_eq!(format!("{c:?} {c}"), "[redacted] [redacted]");
        assert_eq!(c.expose(), "canary-value");
    }

    #[test]
    fn folder_secrets_have_versions_and_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let s = FolderSecrets::new(dir.path());
        assert_eq!(
            s.current("gitea").unwrap_err(),
            SecretError::Missing {
                name: "gitea".into()
            }
        );
        std::fs::write(dir.path().join("gitea"), "  \n").unwrap();
        assert!(matches!(s.current("gitea"), Err(SecretError::Empty { .. })));
        std::fs::write(dir.path().join("gitea"), "one\n").unwrap();
        let (v, n) = s.current("gitea").unwrap();
        assert_eq!(v.expose(), "one");
        std::fs::write(dir.path().join("gitea"), "second\n").unwrap();
        assert_ne!(s.version("gitea").unwrap(), n);
        assert!(matches!(
            s.current("../etc"),
            Err(SecretError::Unreadable { .. })
        ));
    }

    /// A file far larger than any secret (a log, an image put there by mistake) is refused
    /// without being read whole.
    #[test]
    fn a_secret_file_larger_than_any_value_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = FolderSecrets::new(dir.path());
        let most = crate::vault::MAX_VALUE_LEN;
        std::fs::write(dir.path().join("big"), "a".repeat(most * 4)).unwrap();
        let e = s.current("big").unwrap_err();
        assert!(
            matches!(&e, SecretError::Unreadable { message, .. } if message.contains("65536")),
            "{e:?}"
        );
        // The longest value, with its line break, is still read.
        std::fs::write(dir.path().join("long"), format!("{}\r\n", "b".repeat(most))).unwrap();
        assert_eq!(s.current("long").unwrap().0.expose().len(), most);
    }

    /// A secret that is a pipe or a device (a mount gone wrong) is refused at once: the folder
    /// is read on the async runtime, where waiting for a writer would hold a worker.
    #[cfg(unix)]
    #[test]
    fn a_secret_that_is_not_a_regular_file_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let s = FolderSecrets::new(dir.path());
        let (answer, answered) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let _ = answer.send(s.current("pipe"));
        });
        let outcome = answered.recv_timeout(kberg_testkit::WAIT);
        if outcome.is_err() {
            // It waited for a writer: be one, so that the reader ends.
            drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        }
        reader.join().unwrap();
        let e = outcome
            .expect("answered without waiting for a writer")
            .unwrap_err();
        assert!(
            matches!(&e, SecretError::Unreadable { message, .. } if message.contains("not a regular file")),
            "{e:?}"
        );
    }
}
