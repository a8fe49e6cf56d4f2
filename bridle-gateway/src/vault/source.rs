//! Read-only secret sources and the references that name them.
//!
//! Configuration never holds a secret; it holds a reference to one, written `SOURCE:NAME`:
//!
//! - `vault:NAME`: the active version of `NAME` in the vault;
//! - `docker:NAME`: the file `NAME` in the Docker secrets folder (`/run/secrets` by default);
//! - `file:NAME`: the file `NAME` in the legacy `secrets/` folder of the data directory.
//!
//! The two folders are only ever read. A file's content is the secret, less one trailing line
//! break (`\n` or `\r\n`, as `echo` and editors leave it); a file that is missing, or empty after
//! that, is an error naming the reference, so an empty credential is never sent upstream.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use zeroize::Zeroizing;

use super::error::VaultError;
use super::name::check_name;
use super::value::SecretValue;

/// The largest secret value, in bytes (vault values and source files alike).
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// Where a referenced secret comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SecretRef {
    /// `vault:NAME`: the vault's active version.
    Vault(String),
    /// `docker:NAME`: a file of the Docker secrets folder.
    Docker(String),
    /// `file:NAME`: a file of the data directory's `secrets/` folder.
    File(String),
}

impl SecretRef {
    /// The secret's name within its source.
    pub fn name(&self) -> &str {
        match self {
            Self::Vault(n) | Self::Docker(n) | Self::File(n) => n,
        }
    }

    /// The source's prefix: `vault`, `docker` or `file`.
    pub fn source(&self) -> &'static str {
        match self {
            Self::Vault(_) => "vault",
            Self::Docker(_) => "docker",
            Self::File(_) => "file",
        }
    }
}

impl FromStr for SecretRef {
    type Err = VaultError;

    fn from_str(s: &str) -> Result<Self, VaultError> {
        // A reference is written where a secret's value could be pasted by mistake (a token
        // into a `credential:` line or the admin API's field), so a refusal repeats at most the
        // source part: never a text without `SOURCE:`, never what follows the colon.
        let (source, name) = match s.split_once(':') {
            Some(parts) => parts,
            None => {
                return Err(VaultError::InvalidReference {
                    reference: format!("<{} characters>", s.chars().count()),
                    reason: "expected SOURCE:NAME with SOURCE one of vault, docker, file"
                        .to_owned(),
                });
            }
        };
        let invalid = |reason: String| VaultError::InvalidReference {
            reference: format!(
                "{}:<{} characters>",
                source.chars().take(MAX_SHOWN_SOURCE).collect::<String>(),
                name.chars().count()
            ),
            reason,
        };
        let known = matches!(source, "vault" | "docker" | "file");
        if !known {
            return Err(invalid(format!(
                "unknown source {:?}; expected vault, docker or file",
                source.chars().take(MAX_SHOWN_SOURCE).collect::<String>()
            )));
        }
        check_name("secret", name).map_err(|e| {
            invalid(match e {
                VaultError::InvalidName { reason, .. } => {
                    format!("its name is not valid: {reason}")
                }
                other => other.code().to_owned(),
            })
        })?;
        let name = name.to_owned();
        Ok(match source {
            "vault" => Self::Vault(name),
            "docker" => Self::Docker(name),
            _ => Self::File(name),
        })
    }
}

/// The most characters of a refused reference's source part its error repeats.
const MAX_SHOWN_SOURCE: usize = 32;

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source(), self.name())
    }
}

impl serde::Serialize for SecretRef {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A resolved reference: the value, and the vault version when it came from the vault.
#[derive(Debug, Clone)]
pub struct ResolvedSecret {
    /// The reference that was resolved.
    pub reference: SecretRef,
    /// The vault version used (`None` for files), for [`Vault::record_use`](super::Vault::record_use).
    pub version: Option<u64>,
    /// The value.
    pub value: SecretValue,
}

/// Why a secret file could not be read by [`read_bounded`].
pub(crate) use crate::files::FileProblem;

/// The most [`read_bounded`] reads: the longest value, its `\r\n`, and one byte more to know
/// it is longer.
pub(crate) const MAX_FILE_READ: usize = MAX_VALUE_LEN + 3;

/// Reads the secret file at `path`, with its metadata: only a regular file (or a link to
/// one), and no further than [`MAX_FILE_READ`] bytes, so a file far larger than any secret is
/// refused by its caller without being read whole, and a pipe or a device given by mistake is
/// refused before it is opened instead of holding the reading thread until a writer comes or
/// the stream ends: [`read_folder_secret`](crate::files::read_folder_secret), the one reader
/// of every secrets folder (the `docker:`/`file:` sources, the upstream credentials folder and
/// agents' `token_secret`).
pub(crate) fn read_bounded(path: &Path) -> Result<(Zeroizing<Vec<u8>>, fs::Metadata), FileProblem> {
    let most = u64::try_from(MAX_FILE_READ).unwrap_or(u64::MAX);
    crate::files::read_folder_secret(path, most.saturating_sub(1))
}

/// Reads the secret file `dir/name` for `reference` with [`read_bounded`]: a file that is not
/// a regular one is refused `source_unreadable`, a longer one than [`MAX_VALUE_LEN`] (and a
/// line break) `invalid_value`.
pub(crate) fn read_file(
    reference: &str,
    dir: &Path,
    name: &str,
) -> Result<SecretValue, VaultError> {
    let path = dir.join(name);
    let raw = match read_bounded(&path) {
        Ok((raw, _)) => raw,
        Err(FileProblem::Missing) => {
            return Err(VaultError::SourceSecretMissing {
                reference: reference.to_owned(),
                path,
            });
        }
        Err(other) => {
            return Err(VaultError::SourceUnreadable {
                path,
                source: other.into_io(),
            });
        }
    };
    let value = trim_line_break(&raw);
    if value.is_empty() {
        return Err(VaultError::SourceSecretEmpty {
            reference: reference.to_owned(),
            path,
        });
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(VaultError::InvalidValue {
            name: name.to_owned(),
            reason: format!("{} holds more than {MAX_VALUE_LEN} bytes", path.display()),
        });
    }
    Ok(SecretValue::new(value.to_vec()))
}

/// Every secret file of `dir`, sorted by name: regular files (or links to them) whose names do
/// not start with `.`. A file with a name outside the vault's charset, or an empty one, is an
/// error naming it, so an import never half-succeeds.
pub(crate) fn read_folder(dir: &Path) -> Result<Vec<(String, SecretValue)>, VaultError> {
    let unreadable = |source| VaultError::SourceUnreadable {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let file_name = entry.file_name();
        let display = file_name.to_string_lossy().into_owned();
        if display.starts_with('.') {
            continue;
        }
        let path: PathBuf = entry.path();
        let meta = fs::metadata(&path).map_err(|source| VaultError::SourceUnreadable {
            path: path.clone(),
            source,
        })?;
        if !meta.is_file() {
            continue;
        }
        let name = file_name
            .into_string()
            .map_err(|_| VaultError::InvalidName {
                kind: "secret",
                name: display.clone(),
                reason: "file names must be ASCII",
            })?;
        check_name("secret", &name)?;
        names.push(name);
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let reference = format!("{}", dir.join(&name).display());
            read_file(&reference, dir, &name).map(|v| (name, v))
        })
        .collect()
}

fn trim_line_break(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.strip_suffix(b"\r").unwrap_or(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print() {
        for (text, want) in [
            ("vault:gitea-token", SecretRef::Vault("gitea-token".into())),
            (
                "docker:gitea_token",
                SecretRef::Docker("gitea_token".into()),
            ),
            ("file:kanboard.key", SecretRef::File("kanboard.key".into())),
        ] {
            let parsed: SecretRef = text.parse().expect(text);
            assert_eq!(parsed, want);
            assert_eq!(parsed.to_string(), text);
        }
        for (bad, says) in [
            ("gitea", "<5 characters>"),
            ("env:X", "unknown source \"env\""),
            ("vault:", "vault:<0 characters>"),
            (
                "docker:../etc/passwd",
                "must start with an ASCII letter or digit",
            ),
            ("file:a/b", "only ASCII letters"),
            (":x", "unknown source \"\""),
        ] {
            let err = bad.parse::<SecretRef>().expect_err(bad);
            assert_eq!(err.code(), "invalid_reference", "{bad}");
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn a_value_pasted_where_a_reference_belongs_is_not_repeated() {
        for pasted in [
            "ghp_CANARY0123456789abcdef",
            "vault:CANARY secret value",
            "docker:CANARY/../x",
            "admin:CANARYpassword",
            "Bearer CANARY0123",
        ] {
            let err = pasted.parse::<SecretRef>().expect_err(pasted);
            assert_eq!(err.code(), "invalid_reference", "{pasted}");
            assert!(!err.to_string().contains("CANARY"), "{pasted}: {err}");
            assert!(!format!("{err:?}").contains("CANARY"), "{pasted}: {err:?}");
        }
    }

    #[test]
    fn files_lose_one_line_break_and_must_not_be_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, content) in [
            ("a", "tok\n"),
            ("b", "tok\r\n"),
            ("c", "tok"),
            ("d", "tok\n\n"),
        ] {
            fs::write(dir.path().join(name), content).expect("write");
        }
        let read = |n| read_file(n, dir.path(), n).map(|v| v.expose().to_vec());
        assert_eq!(read("a").expect("a"), b"tok");
        assert_eq!(read("b").expect("b"), b"tok");
        assert_eq!(read("c").expect("c"), b"tok");
        assert_eq!(read("d").expect("d"), b"tok\n");
        fs::write(dir.path().join("e"), "\n").expect("write");
        assert_eq!(read("e").expect_err("empty").code(), "source_secret_empty");
        assert_eq!(
            read("zz").expect_err("missing").code(),
            "source_secret_missing"
        );
    }
}
