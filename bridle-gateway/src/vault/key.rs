//! The master key: 32 bytes in a file, from which every vault key is derived.
//!
//! The key lives outside the database on purpose (a Docker secret such as
//! `/run/secrets/bridle_master_key`, or a file the gateway creates with mode 0600 in its data
//! directory on first start), so a copy of the database alone reveals nothing. The file holds
//! the 32 bytes raw, or as 64 hex digits, or as standard base64 (44 characters with padding),
//! each optionally followed by a line break, because `openssl rand -hex 32 > key` and
//! `openssl rand -base64 32 > key` are the easiest ways to make a Docker secret. Anything else
//! is refused with the file's length in the error, never its content; there is no fallback.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use zeroize::Zeroizing;

use super::error::VaultError;

/// The length of the master key in bytes.
pub const MASTER_KEY_LEN: usize = 32;

/// The vault's master key. Prints as `[redacted]`; wiped from memory on drop.
#[derive(Clone)]
pub struct MasterKey(Zeroizing<[u8; MASTER_KEY_LEN]>);

/// Whether [`MasterKey::load_or_create`] found a key or made a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrigin {
    /// The key file existed and was read.
    Loaded,
    /// No key file existed; a new random key was written (mode 0600).
    Created,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey([redacted])")
    }
}

impl MasterKey {
    /// A key from its 32 bytes (tests, or a key held elsewhere).
    pub fn from_bytes(bytes: [u8; MASTER_KEY_LEN]) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, VaultError> {
        let mut bytes = Zeroizing::new([0u8; MASTER_KEY_LEN]);
        getrandom::fill(bytes.as_mut()).map_err(|e| VaultError::Randomness(e.to_string()))?;
        Ok(Self(bytes))
    }

    /// Reads the key from `path` (e.g. a Docker secret). A missing, unreadable, short or long
    /// file is an error; nothing is created. A named pipe (`<(...)`) is read once its writer
    /// comes, waited for at most 30 seconds, as a token file's
    /// ([`TOKEN_PIPE_WAIT`](crate::admin::TOKEN_PIPE_WAIT)); then the key is unreadable, saying
    /// so.
    pub fn load(path: &Path) -> Result<Self, VaultError> {
        Self::load_within(path, crate::files::PIPE_WAIT)
    }

    /// [`Self::load`], a pipe's writer waited for at most `wait`.
    fn load_within(path: &Path, wait: std::time::Duration) -> Result<Self, VaultError> {
        let raw = match crate::files::read_waiting(path, MAX_KEY_FILE_LEN, wait) {
            Ok(raw) => raw,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(VaultError::MasterKeyMissing {
                    path: path.to_path_buf(),
                });
            }
            Err(source) => {
                return Err(VaultError::MasterKeyUnreadable {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        parse(&raw)
            .map(Self)
            .map_err(|reason| VaultError::MasterKeyInvalid {
                path: path.to_path_buf(),
                reason,
            })
    }

    /// Reads the key from `path`, or, if there is no file there, creates one with a fresh random
    /// key (raw 32 bytes, mode 0600, never overwriting a file that appears meanwhile) and says
    /// so in the returned [`KeyOrigin`]. The caller should tell the operator to back it up:
    /// without it the vault cannot be read.
    pub fn load_or_create(path: &Path) -> Result<(Self, KeyOrigin), VaultError> {
        match Self::load(path) {
            Ok(key) => {
                warn_if_readable_by_others(path);
                return Ok((key, KeyOrigin::Loaded));
            }
            Err(VaultError::MasterKeyMissing { .. }) => {}
            Err(e) => return Err(e),
        }
        let key = Self::generate()?;
        let created = |source| VaultError::MasterKeyCreateFailed {
            path: path.to_path_buf(),
            source,
        };
        let mut file = match create_private(path) {
            Ok(file) => file,
            // Another process created it between our read and our create: use theirs.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Self::load(path).map(|k| (k, KeyOrigin::Loaded));
            }
            Err(e) => return Err(created(e)),
        };
        if let Err(e) = file
            .write_all(key.0.as_ref())
            .and_then(|()| file.sync_all())
        {
            // Never leave a half-written key behind: the next start would refuse it anyway.
            let _ = fs::remove_file(path);
            return Err(created(e));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the new directory entry durable too; a failure here only weakens durability.
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        tracing::info!(path = %path.display(), "created a new vault master key");
        Ok((key, KeyOrigin::Created))
    }

    pub(crate) fn bytes(&self) -> &[u8; MASTER_KEY_LEN] {
        &self.0
    }
}

/// The longest key file read: every valid form is under 50 bytes, so a file longer than this
/// is refused from its first bytes, and a file that never ends (a pipe, a device) is not read
/// forever.
const MAX_KEY_FILE_LEN: u64 = 1024;

/// Where a created key file goes, opened exclusively with mode 0600.
fn create_private(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "the vault master key file is readable by other users; chmod 600 it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

/// Parses a key file's content: raw 32 bytes, 64 hex digits, or base64 of 32 bytes.
fn parse(raw: &[u8]) -> Result<Zeroizing<[u8; MASTER_KEY_LEN]>, String> {
    let mut key = Zeroizing::new([0u8; MASTER_KEY_LEN]);
    if raw.len() == MASTER_KEY_LEN {
        key.copy_from_slice(raw);
        return Ok(key);
    }
    let text = trim_line_break(raw);
    if text.len() == 2 * MASTER_KEY_LEN && text.iter().all(u8::is_ascii_hexdigit) {
        for (i, pair) in text.chunks_exact(2).enumerate() {
            key[i] = (hex_digit(pair[0]) << 4) | hex_digit(pair[1]);
        }
        return Ok(key);
    }
    if text.len() == 44 {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Zeroizing::new);
        if let Ok(decoded) = decoded
            && decoded.len() == MASTER_KEY_LEN
        {
            key.copy_from_slice(&decoded);
            return Ok(key);
        }
    }
    let held = if raw.len() as u64 > MAX_KEY_FILE_LEN {
        format!("more than {MAX_KEY_FILE_LEN}")
    } else {
        raw.len().to_string()
    };
    Err(format!(
        "it holds {held} bytes; expected 32 raw bytes, 64 hex digits or 44 characters of base64"
    ))
}

fn trim_line_break(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.strip_suffix(b"\r").unwrap_or(raw)
}

fn hex_digit(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// The default name of the key file in a data directory.
pub const DEFAULT_KEY_FILE: &str = "vault.key";

/// The key file path in a data directory (`<data>/vault.key`).
pub fn default_key_path(data_dir: &Path) -> PathBuf {
    data_dir.join(DEFAULT_KEY_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A master key path that is a named pipe nothing writes to (a secret mount gone wrong)
    /// held `bridle serve`'s start for ever, saying nothing; it is refused once the wait is
    /// over, naming the file.
    #[cfg(unix)]
    #[test]
    fn a_key_pipe_without_a_writer_is_refused_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = crate::files::test_fifo(dir.path());
        let (answer, answered) = std::sync::mpsc::channel();
        let path = fifo.clone();
        let reader = std::thread::spawn(move || {
            let _ = answer.send(MasterKey::load_within(
                &path,
                std::time::Duration::from_millis(20),
            ));
        });
        let outcome = answered.recv_timeout(kberg_testkit::WAIT);
        if outcome.is_err() {
            // It waited for a writer: be one, so that the reader ends.
            drop(fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        }
        reader.join().unwrap();
        let e = outcome
            .expect("answered once the wait was over")
            .unwrap_err();
        assert!(
            matches!(&e, VaultError::MasterKeyUnreadable { source, .. } if source.kind() == ErrorKind::TimedOut),
            "{e}"
        );
        let shown = e.to_string();
        assert!(shown.contains("pipe"), "{shown}");
        assert!(shown.contains(&fifo.display().to_string()), "{shown}");
    }

    /// A key given through a pipe with a writer (`<(...)`) is read.
    #[cfg(unix)]
    #[test]
    fn a_key_pipe_with_a_writer_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = crate::files::test_fifo(dir.path());
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut w = fs::OpenOptions::new().write(true).open(&path).unwrap();
            w.write_all(&[7u8; MASTER_KEY_LEN]).unwrap();
        });
        let key = MasterKey::load_within(&fifo, kberg_testkit::WAIT).unwrap();
        writer.join().unwrap();
        assert_eq!(key.bytes(), &[7u8; MASTER_KEY_LEN]);
    }

    #[test]
    fn parses_raw_hex_and_base64() {
        let bytes: [u8; 32] = std::array::from_fn(|i| i as u8 * 7);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        for form in [
            bytes.to_vec(),
            hex.clone().into_bytes(),
            format!("{hex}\n").into_bytes(),
            hex.to_uppercase().into_bytes(),
            b64.clone().into_bytes(),
            format!("{b64}\r\n").into_bytes(),
        ] {
            assert_eq!(*parse(&form).expect("a valid key form"), bytes);
        }
    }

    #[test]
    fn refuses_other_lengths_without_echoing_content() {
        for bad in [
            &b""[..],
            b"short",
            &[7u8; 31],
            &[7u8; 33],
            &[b'g'; 64],
            &[b'a'; 63],
            b"not base64 at all, but forty-four chars!!!!",
        ] {
            let reason = parse(bad).expect_err("refused");
            assert!(
                reason.contains(&format!("holds {} bytes", bad.len())),
                "{reason}"
            );
        }
    }

    #[test]
    fn debug_is_redacted() {
        let key = MasterKey::from_bytes([0x41; 32]);
        assert_eq!(format!("{key:?}"), "MasterKey([redacted])");
    }
}
