//! The parsed documents of a store, kept while their source is unchanged.
//!
//! The gateway loads a project's document on every call that checks a permission, and parsing
//! the YAML was about a third of a forwarded call's CPU.
//!
//! - **Files** (SQLite stores): a file's stamp (inode, length, modification and status-change
//!   times) is read with one `stat`; a document is served from memory only while its file has
//!   the same stamp. A file modified within [`SETTLE`] of the moment it was read is not kept,
//!   so two writes inside one tick of the file system's clock (the same stamp, different
//!   content) cannot leave a stale document behind: the same rule git applies to its index.
//! - **The projects folder's listing** (which projects have a document) is kept the same way,
//!   by the folder's stamp: creating, removing or renaming an entry changes the folder's
//!   modification and status-change times, so one `stat` replaces opening and reading the
//!   folder on every permission check.
//! - **Database** (PostgreSQL stores): the newest revision's text is still read from the
//!   database on every load (another replica may have written it), and the parse is skipped
//!   when that text is byte for byte the text the kept document was parsed from. Nothing can
//!   go stale: the key is the content itself.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::yaml::Loaded;

/// How old a file's last change must be before its parsed document is kept.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    inode: u64,
    len: u64,
    modified: SystemTime,
    changed_ns: i128,
}

impl Stamp {
    /// The stamp of `meta`, or `None` where the platform does not give one (nothing is kept).
    pub(crate) fn of(meta: &std::fs::Metadata) -> Option<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Some(Self {
                inode: meta.ino(),
                len: meta.len(),
                modified: meta.modified().ok()?,
                changed_ns: i128::from(meta.ctime()) * 1_000_000_000
                    + i128::from(meta.ctime_nsec()),
            })
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            None
        }
    }

    /// Whether the file last changed long enough before `now` for its content to be kept.
    fn settled(&self, now: SystemTime) -> bool {
        now.duration_since(self.modified)
            .is_ok_and(|age| age >= SETTLE)
    }
}

/// Parsed documents by project, each with the stamp of the file it was parsed from.
#[derive(Debug, Default)]
pub(crate) struct DocumentCache {
    entries: Mutex<HashMap<String, (Stamp, Loaded)>>,
    /// Parsed documents by project, each with the text it was parsed from (database source).
    texts: Mutex<HashMap<String, (String, Loaded)>>,
    /// The projects folder's listing, with the folder's stamp when it was read.
    listing: Mutex<Option<(Stamp, Vec<String>)>>,
}

impl DocumentCache {
    /// The document of `project` if its file still has `stamp`.
    pub(crate) fn get(&self, project: &str, stamp: Stamp) -> Option<Loaded> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(project) {
            Some((kept, loaded)) if *kept == stamp => Some(loaded.clone()),
            _ => None,
        }
    }

    /// Keeps `loaded`, parsed from a file with `stamp`, if the file has settled; forgets the
    /// project's entry otherwise.
    pub(crate) fn put(&self, project: &str, stamp: Stamp, loaded: &Loaded) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if stamp.settled(SystemTime::now()) {
            entries.insert(project.to_owned(), (stamp, loaded.clone()));
        } else {
            entries.remove(project);
        }
    }

    /// The projects folder's listing, if the folder still has `stamp`.
    pub(crate) fn listing(&self, stamp: Stamp) -> Option<Vec<String>> {
        match &*self
            .listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some((kept, names)) if *kept == stamp => Some(names.clone()),
            _ => None,
        }
    }

    /// Keeps `names`, listed from a folder with `stamp`, if the folder has settled (the same
    /// rule as for a document's file); forgets the kept listing otherwise.
    pub(crate) fn put_listing(&self, stamp: Stamp, names: &[String]) {
        let mut listing = self
            .listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *listing = stamp
            .settled(SystemTime::now())
            .then(|| (stamp, names.to_vec()));
    }

    /// Forgets `project` (its file is gone).
    pub(crate) fn forget(&self, project: &str) {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(project);
    }

    /// The document of `project` parsed from exactly `text`, or `parse(text)` (kept for the
    /// next load when it succeeds; a text that fails to parse is not kept, so its error is
    /// reported on every load).
    pub(crate) fn parsed_text<E>(
        &self,
        project: &str,
        text: String,
        parse: impl FnOnce(&str) -> Result<Loaded, E>,
    ) -> Result<Loaded, E> {
        {
            let texts = self
                .texts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((kept, loaded)) = texts.get(project)
                && *kept == text
            {
                return Ok(loaded.clone());
            }
        }
        // Parsed outside the lock: loads of other projects do not wait for this one.
        let loaded = parse(&text)?;
        self.texts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(project.to_owned(), (text, loaded.clone()));
        Ok(loaded)
    }
}

/// The stamp of the file at `path`, read with one `stat`.
pub(crate) fn stamp(path: &Path) -> std::io::Result<Option<Stamp>> {
    Ok(Stamp::of(&std::fs::metadata(path)?))
}
