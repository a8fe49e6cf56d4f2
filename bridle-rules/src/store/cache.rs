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
//! - **Every document at once** ([`Documents`], what a permission check reads): kept with a
//!   key that says when any document may have changed. For files, the folder's stamp and every
//!   document file's stamp, all settled, and only a set in which every document loaded; for
//!   the database, the documents version that a trigger on the revisions table raises with
//!   every statement that writes it (so also an edit made by hand in SQL), read before the
//!   documents, and a set with a text that does not parse is kept too (its error goes with the
//!   text, and the text with the version). Checking the key costs a `stat` per project or one
//!   small query, and the kept set is shared, not copied. The set also records when a key
//!   last found it current, so a check that may read a set a moment old (the permission check
//!   of a call whose request was just authenticated against the same set) takes it without
//!   any I/O; a write through the store, or a read that could not keep its set, forgets it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::error::RulesError;
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
    pub(crate) fn settled(&self, now: SystemTime) -> bool {
        now.duration_since(self.modified)
            .is_ok_and(|age| age >= SETTLE)
    }
}

/// Parsed documents by project, each with the stamp of the file it was parsed from.
#[derive(Debug, Default)]
pub(crate) struct DocumentCache {
    entries: Mutex<HashMap<String, (Stamp, Arc<Loaded>)>>,
    /// Parsed documents by project, each with the text it was parsed from (database source).
    texts: Mutex<HashMap<String, (String, Arc<Loaded>)>>,
    /// The projects folder's listing, with the folder's stamp when it was read.
    listing: Mutex<Option<(Stamp, Arc<[String]>)>>,
    /// Every project's document, with what says that none of them changed since.
    set: Mutex<KeptSet>,
}

/// The kept set of every document and the newest moment it is known to be current.
#[derive(Debug, Default)]
struct KeptSet {
    kept: Option<(SetKey, Arc<Documents>)>,
    /// When the newest key applied here (a confirmation, a new set, or a forget) was read.
    as_of: Option<Instant>,
}

/// What a kept [`Documents`] was read under (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetKey {
    /// The projects folder's stamp, then each listed project's file stamp, in listing order.
    Files(Stamp, Vec<Stamp>),
    /// The database's documents version.
    Database(u64),
}

impl DocumentCache {
    /// The document of `project` if its file still has `stamp`.
    pub(crate) fn get(&self, project: &str, stamp: Stamp) -> Option<Arc<Loaded>> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(project) {
            Some((kept, loaded)) if *kept == stamp => Some(Arc::clone(loaded)),
            _ => None,
        }
    }

    /// Keeps `loaded`, parsed from a file with `stamp`, if the file has settled; forgets the
    /// project's entry otherwise.
    pub(crate) fn put(&self, project: &str, stamp: Stamp, loaded: &Arc<Loaded>) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if stamp.settled(SystemTime::now()) {
            entries.insert(project.to_owned(), (stamp, Arc::clone(loaded)));
        } else {
            entries.remove(project);
        }
    }

    /// The projects folder's listing, if the folder still has `stamp`.
    pub(crate) fn listing(&self, stamp: Stamp) -> Option<Arc<[String]>> {
        match &*self
            .listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some((kept, names)) if *kept == stamp => Some(Arc::clone(names)),
            _ => None,
        }
    }

    /// Keeps `names`, listed from a folder with `stamp`, if the folder has settled (the same
    /// rule as for a document's file); forgets the kept listing otherwise.
    pub(crate) fn put_listing(&self, stamp: Stamp, names: &Arc<[String]>) {
        let mut listing = self
            .listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *listing = stamp
            .settled(SystemTime::now())
            .then(|| (stamp, Arc::clone(names)));
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
    ) -> Result<Arc<Loaded>, E> {
        {
            let texts = self
                .texts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((kept, loaded)) = texts.get(project)
                && *kept == text
            {
                return Ok(Arc::clone(loaded));
            }
        }
        // Parsed outside the lock: loads of other projects do not wait for this one.
        let loaded = Arc::new(parse(&text)?);
        self.texts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(project.to_owned(), (text, Arc::clone(&loaded)));
        Ok(loaded)
    }

    /// The kept set of every document, if it was read under `key`; `read_at` is when `key`
    /// was read, so the set is known current as of then.
    pub(crate) fn set(&self, key: &SetKey, read_at: Instant) -> Option<Arc<Documents>> {
        let mut state = self
            .set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let set = match &state.kept {
            Some((kept, set)) if kept == key => Arc::clone(set),
            _ => return None,
        };
        state.as_of = state.as_of.max(Some(read_at));
        Some(set)
    }

    /// Keeps `set`, read under a key read at `read_at` (the caller has checked that the key
    /// may be kept); `None` forgets the kept set. A state recorded from a newer key is left as
    /// it is: a slow reader cannot put back an older set.
    pub(crate) fn put_set(&self, kept: Option<(SetKey, Arc<Documents>)>, read_at: Instant) {
        let mut state = self
            .set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.as_of.is_some_and(|newest| newest > read_at) {
            return;
        }
        *state = KeptSet {
            kept,
            as_of: Some(read_at),
        };
    }

    /// The kept set, if a key read at most `max_age` ago found it current.
    pub(crate) fn recent_set(&self, max_age: Duration) -> Option<Arc<Documents>> {
        let state = self
            .set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_, set) = state.kept.as_ref()?;
        state
            .as_of
            .is_some_and(|t| t.elapsed() <= max_age)
            .then(|| Arc::clone(set))
    }
}

/// Every project's document, read at one moment and shared: what a permission check reads
/// ([`RulesStore::documents`](super::RulesStore::documents)). A project whose document could
/// not be loaded is listed with its error.
#[derive(Debug, Default)]
pub struct Documents {
    entries: Vec<(String, SharedLoad)>,
}

/// One project's document as a [`Documents`] holds it, or the error that loading it gave.
pub(crate) type SharedLoad = Result<Arc<Loaded>, Arc<RulesError>>;

impl Documents {
    /// The set of `entries`, put in name order.
    pub(crate) fn new(mut entries: Vec<(String, SharedLoad)>) -> Self {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Self { entries }
    }

    /// Every project in name order, with its document or the error that loading it gave.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Result<&Loaded, &RulesError>)> {
        self.entries
            .iter()
            .map(|(name, doc)| (name.as_str(), doc.as_deref().map_err(|e| &**e)))
    }

    /// One project's document (or its error); `None` for a project that has none.
    pub fn get(&self, project: &str) -> Option<Result<&Loaded, &RulesError>> {
        self.entry(project)
            .map(|doc| doc.as_deref().map_err(|e| &**e))
    }

    /// One project's shared document; `Err(())` when it did not load, `None` for a project
    /// that has none.
    pub(crate) fn shared(&self, project: &str) -> Option<Result<Arc<Loaded>, ()>> {
        self.entry(project)
            .map(|doc| doc.as_ref().map(Arc::clone).map_err(|_| ()))
    }

    fn entry(&self, project: &str) -> Option<&SharedLoad> {
        self.entries
            .binary_search_by(|(name, _)| name.as_str().cmp(project))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// The projects, in name order.
    pub fn projects(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(name, _)| name.as_str())
    }

    /// How many projects there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no project.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether every project's document loaded.
    pub(crate) fn all_loaded(&self) -> bool {
        self.entries.iter().all(|(_, d)| d.is_ok())
    }
}

/// The stamp of the file at `path`, read with one `stat`.
pub(crate) fn stamp(path: &Path) -> std::io::Result<Option<Stamp>> {
    Ok(Stamp::of(&std::fs::metadata(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Arc<Documents> {
        Arc::new(Documents::new(Vec::new()))
    }

    /// Two checks that overlap: the one that read its key later wins, whichever puts last.
    #[test]
    fn a_set_read_under_an_older_key_does_not_replace_a_newer_one() {
        let cache = DocumentCache::default();
        let hour = Duration::from_secs(3600);
        let (earlier, later) = (Instant::now(), Instant::now() + Duration::from_millis(1));
        let newer = set();
        cache.put_set(Some((SetKey::Database(2), Arc::clone(&newer))), later);
        cache.put_set(Some((SetKey::Database(1), set())), earlier);
        assert!(Arc::ptr_eq(&newer, &cache.recent_set(hour).unwrap()));
        assert!(cache.set(&SetKey::Database(1), later).is_none());
        assert!(cache.set(&SetKey::Database(2), earlier).is_some());

        // A forget read before the newer key is ignored too; one read after it is not.
        cache.put_set(None, earlier);
        assert!(cache.recent_set(hour).is_some());
        cache.put_set(None, later + Duration::from_millis(1));
        assert!(cache.recent_set(hour).is_none());
        assert!(cache.set(&SetKey::Database(2), later).is_none());
    }

    #[test]
    fn a_set_older_than_the_asked_age_is_not_recent() {
        let cache = DocumentCache::default();
        let read_at = Instant::now();
        cache.put_set(Some((SetKey::Database(1), set())), read_at);
        // Wait until the age is past without a sleep: the clock moves forward.
        while read_at.elapsed() <= Duration::from_micros(1) {
            std::hint::spin_loop();
        }
        assert!(cache.recent_set(Duration::from_micros(1)).is_none());
        assert!(cache.recent_set(Duration::from_secs(3600)).is_some());
    }
}
