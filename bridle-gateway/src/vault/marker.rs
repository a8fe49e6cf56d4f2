//! The token-change marker of a SQLite vault: a small file beside the database (`vault.db` has
//! `vault.db-tokens`) that every change to agent tokens rewrites, in whichever process makes it
//! (the gateway, or the `bridle` command line on the same data directory).
//!
//! It lets a gateway answer a token check from its cache of verified tokens with one `stat`
//! instead of a database read on the blocking pool, and still refuse a token revoked by another
//! process at once. The cache is trusted only while the marker's stamp (device, inode, size,
//! modification and change times) is the one it saw when it last emptied itself, and only once
//! that stamp has settled: a marker modified less than [`SETTLE`] ago is not trusted at all,
//! since two rewrites within one tick of the file system's clock can leave the same
//! modification time. A change touches the marker before its transaction commits and again
//! after, so a check that starts after the change returned sees a new or young stamp, and the
//! cache is emptied and bypassed.
//!
//! What the marker does not cover: a write to the database by anything but the vault's code
//! (the `sqlite3` shell, a restored file) and a process that died between its commit and the
//! second touch. A cached entry lasts at most [`super::TOKEN_CACHE_MAX_AGE`], which bounds both.
//! The data directory must be on a local file system: a network file system may answer `stat`
//! from a stale attribute cache.

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long after its last change the marker starts to be trusted.
pub const SETTLE: Duration = Duration::from_secs(2);

/// The file beside one SQLite vault.
#[derive(Debug)]
pub(crate) struct ChangeMarker {
    path: PathBuf,
}

/// What `stat` says of the marker: equal stamps mean no change was made in between, once the
/// stamp has settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    modified: SystemTime,
    len: u64,
    #[cfg(unix)]
    inode: (u64, u64, i64, i64),
}

impl Stamp {
    /// A stamp of a file last modified at `modified` with `len` bytes.
    #[cfg(test)]
    pub(crate) fn at(modified: SystemTime, len: u64) -> Self {
        Self {
            modified,
            len,
            #[cfg(unix)]
            inode: (0, 0, 0, 0),
        }
    }

    fn of(meta: &Metadata) -> Option<Self> {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Some(Self {
            modified: meta.modified().ok()?,
            len: meta.len(),
            #[cfg(unix)]
            inode: (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Whether the marker last changed at least [`SETTLE`] before `now`. A modification time
    /// in the future (a clock set back) is not settled.
    pub(crate) fn settled(&self, now: SystemTime) -> bool {
        now.duration_since(self.modified)
            .is_ok_and(|age| age >= SETTLE)
    }
}

impl ChangeMarker {
    /// The marker of the vault database at `db`, created (empty, mode 0600) if missing.
    pub(crate) fn beside(db: &Path) -> std::io::Result<Self> {
        let mut name = db.as_os_str().to_owned();
        name.push("-tokens");
        let marker = Self {
            path: PathBuf::from(name),
        };
        if std::fs::symlink_metadata(&marker.path).is_err() {
            marker.write()?;
        }
        Ok(marker)
    }

    /// The marker's stamp now: `None` if it cannot be read (missing, not a plain file), which
    /// leaves the cache unused.
    pub(crate) fn stamp(&self) -> Option<Stamp> {
        std::fs::symlink_metadata(&self.path)
            .ok()
            .filter(Metadata::is_file)
            .and_then(|m| Stamp::of(&m))
    }

    /// Marks a change of agent tokens. If the marker cannot be rewritten it is removed, so that
    /// every gateway on this vault stops trusting its cache; if that fails too, the error is
    /// logged and cached entries end with their maximum age.
    pub(crate) fn touch(&self) {
        let Err(e) = self.write() else {
            return;
        };
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "could not mark a token change; marker removed, token checks read the vault"
            ),
            Err(e2) if e2.kind() == std::io::ErrorKind::NotFound => {}
            Err(e2) => tracing::error!(
                path = %self.path.display(),
                error = %e,
                remove_error = %e2,
                "could not mark a token change; other gateways on this vault may accept a \
                 changed token until their cached entries expire"
            ),
        }
    }

    /// Rewrites the marker with the time of the change (its content is not read; writing it
    /// updates its modification time).
    fn write(&self) -> std::io::Result<()> {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        options
            .open(&self.path)?
            .write_all(format!("{nanos}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_changes_the_stamp_and_a_fresh_one_is_not_settled() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("vault.db");
        let m = ChangeMarker::beside(&db).expect("created");
        assert!(dir.path().join("vault.db-tokens").is_file());
        let first = m.stamp().expect("stamp");
        assert!(!first.settled(SystemTime::now()), "just written");
        assert!(first.settled(SystemTime::now() + SETTLE));
        assert!(
            !first.settled(UNIX_EPOCH),
            "a clock behind the file is not settled"
        );
        // Opening again leaves an existing marker as it is.
        let again = ChangeMarker::beside(&db).expect("opened");
        assert_eq!(again.stamp(), Some(first));
        m.touch();
        let second = m.stamp().expect("stamp");
        assert_ne!(first, second, "a rewrite changes the change time at least");
        std::fs::remove_file(dir.path().join("vault.db-tokens")).expect("removed");
        assert_eq!(m.stamp(), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_marker_that_cannot_be_rewritten_is_removed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let m = ChangeMarker::beside(&dir.path().join("vault.db")).expect("created");
        let path = dir.path().join("vault.db-tokens");
        // A link into a folder that does not exist: rewriting fails whoever runs this.
        std::fs::remove_file(&path).expect("removed");
        std::os::unix::fs::symlink(dir.path().join("gone/marker"), &path).expect("link");
        m.touch();
        assert!(std::fs::symlink_metadata(&path).is_err(), "removed");
        assert_eq!(m.stamp(), None, "so no gateway trusts its cache");
        // A marker that cannot be removed either (a folder in its place) is only logged.
        std::fs::create_dir(&path).expect("a folder");
        m.touch();
        assert_eq!(m.stamp(), None, "a folder is never a trusted stamp");
    }
}
