//! The embedded vector store: SQLite on disk, an exact in-memory scan for search.
//!
//! Why this engine: at the sizes Bridle meets (session memory and indexed example repositories,
//! up to about 100k chunks) an exact scan of an in-memory copy of the vectors answers a query in
//! a few milliseconds with perfect recall, needs no index build, and costs nothing extra to
//! compile; `benches/benches/memory_search.rs` measures it against a plain brute-force baseline
//! (figures in `benches/README.md`). SQLite (WAL journal) is the durable copy: every write is one
//! transaction, so a killed process leaves either the old or the new state on disk, never a torn
//! one, and the store needs no server.
//!
//! Consistency: writers are serialized by the connection's mutex. Each write commits to SQLite
//! first and only then applies the same change to the in-memory copy under the collection's
//! write lock; searches hold the read lock for the whole scan. A search therefore sees the
//! state before a write or after it, never part of it, which is what makes
//! [`VectorStore::replace`] atomic for readers.
//!
//! Several processes may open the same file (the gateway serving searches while
//! `bridle memory index` writes): each read first compares SQLite's `data_version`, which moves
//! only when another connection commits, and reloads the in-memory copy when it moved.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::keywords::{self, Bm25Index, keyword_text};
use super::topk::{TopK, Worst};
use super::{
    CollectionConfig, Distance, Filter, Payload, Point, PointId, Record, ScoredPoint, VectorStore,
    dot, normalize,
};
use crate::error::{MemoryError, Result};

/// The embedded store. Cheap to clone (shared).
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<EmbeddedDb>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// The store's database and the in-memory copy of its collections.
struct EmbeddedDb {
    path: Option<PathBuf>,
    db: Mutex<Connection>,
    collections: RwLock<HashMap<String, Arc<RwLock<Collection>>>>,
    /// The `data_version` the in-memory copy reflects.
    seen_version: AtomicI64,
}

/// One collection's in-memory copy: row `i` of `vectors` belongs to `ids[i]` and `payloads[i]`.
struct Collection {
    config: CollectionConfig,
    ids: Vec<PointId>,
    vectors: Vec<f32>,
    payloads: Vec<Arc<Payload>>,
    slots: HashMap<PointId, usize>,
    /// BM25 over the rows' keyword text, document `i` for row `i`: built by the first hybrid
    /// search (a collection only ever searched by vector pays nothing for it), then kept in step
    /// by `put` and `remove` at the cost of the row they write.
    keywords: OnceLock<Bm25Index>,
}

impl Collection {
    fn new(config: CollectionConfig) -> Self {
        Self {
            config,
            ids: Vec::new(),
            vectors: Vec::new(),
            payloads: Vec::new(),
            slots: HashMap::new(),
            keywords: OnceLock::new(),
        }
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    fn row(&self, i: usize) -> &[f32] {
        let d = self.config.dimension;
        &self.vectors[i * d..(i + 1) * d]
    }

    fn put(&mut self, id: PointId, vector: &[f32], payload: Arc<Payload>) {
        let d = self.config.dimension;
        let row = match self.slots.get(&id) {
            Some(&i) => {
                self.vectors[i * d..(i + 1) * d].copy_from_slice(vector);
                i
            }
            None => {
                let i = self.ids.len();
                self.slots.insert(id, i);
                self.ids.push(id);
                self.vectors.extend_from_slice(vector);
                i
            }
        };
        if let Some(index) = self.keywords.get_mut() {
            index.put(row, &keyword_text(&payload));
        }
        match self.payloads.get_mut(row) {
            Some(p) => *p = payload,
            None => self.payloads.push(payload),
        }
    }

    /// Removes a point by moving the last row into its slot.
    fn remove(&mut self, id: PointId) -> bool {
        let Some(i) = self.slots.remove(&id) else {
            return false;
        };
        // The index renumbers as the rows do: the last document takes the removed one's number.
        if let Some(index) = self.keywords.get_mut() {
            index.swap_remove(i);
        }
        let d = self.config.dimension;
        let last = self.ids.len() - 1;
        if i != last {
            self.vectors.copy_within(last * d..(last + 1) * d, i * d);
            self.ids.swap(i, last);
            self.payloads.swap(i, last);
            self.slots.insert(self.ids[i], i);
        }
        self.ids.pop();
        self.payloads.pop();
        self.vectors.truncate(last * d);
        true
    }

    fn matching<'a>(&'a self, filter: Option<&'a Filter>) -> impl Iterator<Item = usize> + 'a {
        let filter = filter.filter(|f| !f.is_empty());
        (0..self.len())
            .filter(move |&i| filter.is_none_or(|f| f.matches(self.ids[i], &self.payloads[i])))
    }

    /// The vector ranking and the BM25 ranking, fused.
    fn search_hybrid(
        &self,
        query: &[f32],
        text: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Vec<ScoredPoint> {
        let n = keywords::candidates(limit);
        let by_vector: Vec<usize> = self
            .search(query, filter, n)
            .iter()
            .filter_map(|p| self.slots.get(&p.id).copied())
            .collect();
        let index = self
            .keywords
            .get_or_init(|| Bm25Index::build(self.payloads.iter().map(|p| keyword_text(p))));
        debug_assert_eq!(index.len(), self.len(), "one keyword document per row");
        let filter = filter.filter(|f| !f.is_empty());
        let by_keywords: Vec<usize> = index
            .search(
                text,
                |i| filter.is_none_or(|f| f.matches(self.ids[i], &self.payloads[i])),
                n,
            )
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        keywords::fuse(&by_vector, &by_keywords, limit)
            .into_iter()
            .map(|(i, score)| ScoredPoint {
                id: self.ids[i],
                score,
                payload: Payload::clone(&self.payloads[i]),
            })
            .collect()
    }

    fn search(&self, query: &[f32], filter: Option<&Filter>, limit: usize) -> Vec<ScoredPoint> {
        let mut top = TopK::new(limit);
        match filter.filter(|f| !f.is_empty()) {
            None if self.len() >= PARALLEL_SCAN_POINTS => {
                // Large unfiltered scans are split across cores, each keeping its own best k.
                let d = self.config.dimension;
                let parts = std::thread::available_parallelism()
                    .map_or(1, |n| n.get())
                    .clamp(1, 4);
                let rows_per_part = self.len().div_ceil(parts);
                let partials: Option<Vec<TopK>> = std::thread::scope(|s| {
                    let handles: Vec<_> = self
                        .vectors
                        .chunks(rows_per_part * d)
                        .enumerate()
                        .map(|(p, block)| {
                            s.spawn(move || {
                                let mut t = TopK::new(limit);
                                for (i, row) in block.chunks_exact(d).enumerate() {
                                    t.push(dot(row, query), p * rows_per_part + i);
                                }
                                t
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().ok()).collect()
                });
                match partials {
                    Some(partials) => {
                        for t in partials {
                            for Worst(score, row) in t.heap {
                                top.push(score, row);
                            }
                        }
                    }
                    // A scan thread only does arithmetic on in-bounds slices; should one fail
                    // anyway, scan again on this thread rather than answer with a part.
                    None => {
                        for (i, row) in self.vectors.chunks_exact(d).enumerate() {
                            top.push(dot(row, query), i);
                        }
                    }
                }
            }
            None => {
                let d = self.config.dimension;
                for (i, row) in self.vectors.chunks_exact(d).enumerate() {
                    top.push(dot(row, query), i);
                }
            }
            Some(f) => {
                for i in 0..self.len() {
                    if f.matches(self.ids[i], &self.payloads[i]) {
                        top.push(dot(self.row(i), query), i);
                    }
                }
            }
        }
        top.into_sorted()
            .into_iter()
            .map(|(score, i)| ScoredPoint {
                id: self.ids[i],
                score,
                payload: Payload::clone(&self.payloads[i]),
            })
            .collect()
    }
}

/// From this many points on, an unfiltered search scans in parallel.
const PARALLEL_SCAN_POINTS: usize = 32_768;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave SQLite torn (transactions roll back on drop).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The bytes of one vector of `dimension`, when a vector that long can be stored at all (its
/// byte count and the dimension itself fit the database's integers).
fn vector_bytes(dimension: usize) -> Option<usize> {
    dimension
        .checked_mul(4)
        .filter(|b| i64::try_from(*b).is_ok())
}

fn from_blob(b: &[u8], dimension: usize) -> Option<Vec<f32>> {
    if Some(b.len()) != vector_bytes(dimension) {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// SQLite stores signed 64-bit integers; ids keep their bits.
fn sql_id(id: PointId) -> i64 {
    i64::from_ne_bytes(id.to_ne_bytes())
}

fn point_id(v: i64) -> PointId {
    u64::from_ne_bytes(v.to_ne_bytes())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    dimension INTEGER NOT NULL,
    distance TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS points (
    collection TEXT NOT NULL,
    id INTEGER NOT NULL,
    vector BLOB NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (collection, id)
) WITHOUT ROWID;
";

/// Reads every collection from the database.
fn load_all(conn: &Connection) -> Result<HashMap<String, Collection>> {
    let mut collections = HashMap::new();
    let mut stmt = conn.prepare("SELECT name, dimension, distance FROM collections")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut points =
        conn.prepare("SELECT id, vector, payload FROM points WHERE collection = ?1 ORDER BY id")?;
    for row in rows {
        let (name, dim, distance) = row?;
        let distance = Distance::parse(&distance).ok_or_else(|| {
            MemoryError::Store(format!(
                "collection `{name}` has unknown distance `{distance}`"
            ))
        })?;
        // A damaged file may record any number: one no vector can have is refused here, before
        // a row's offset is computed from it.
        let dimension = usize::try_from(dim)
            .ok()
            .filter(|d| *d > 0 && vector_bytes(*d).is_some())
            .ok_or_else(|| {
                MemoryError::Store(format!("collection `{name}` has dimension {dim}"))
            })?;
        let mut c = Collection::new(CollectionConfig {
            dimension,
            distance,
        });
        let mut q = points.query(params![name])?;
        while let Some(r) = q.next()? {
            let id = point_id(r.get(0)?);
            let blob: Vec<u8> = r.get(1)?;
            let vector = from_blob(&blob, dimension).ok_or_else(|| {
                MemoryError::Store(format!(
                    "point {id} of `{name}` has a vector of {} bytes",
                    blob.len()
                ))
            })?;
            let text: String = r.get(2)?;
            let payload: Payload = serde_json::from_str(&text).map_err(|e| {
                MemoryError::Store(format!(
                    "point {id} of `{name}` has an unreadable payload: {e}"
                ))
            })?;
            c.put(id, &vector, Arc::new(payload));
        }
        // The name is the database file's text: written escaped, as the errors below.
        tracing::debug!(collection = ?name, points = c.len(), "loaded collection");
        collections.insert(name, c);
    }
    Ok(collections)
}

/// SQLite's counter of commits made by other connections.
fn data_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

impl EmbeddedStore {
    /// Opens (or creates) the store in the SQLite file at `path` and loads it into memory.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| MemoryError::Store(format!("cannot create {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path)?;
        // WAL + NORMAL: a killed process never corrupts the database or loses a committed
        // transaction; only a power loss may lose the last few commits.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Self::from_connection(conn, Some(path.to_path_buf()))
    }

    /// A store that lives in memory only (nothing persists); for tools and tests that want a
    /// scratch store.
    pub fn open_in_memory() -> Result<Self> {
        Self::from_connection(Connection::open_in_memory()?, None)
    }

    fn from_connection(conn: Connection, path: Option<PathBuf>) -> Result<Self> {
        conn.execute_batch(SCHEMA)?;
        let collections = load_all(&conn)?
            .into_iter()
            .map(|(name, c)| (name, Arc::new(RwLock::new(c))))
            .collect();
        let version = data_version(&conn)?;
        Ok(Self {
            inner: Arc::new(EmbeddedDb {
                path,
                db: Mutex::new(conn),
                collections: RwLock::new(collections),
                seen_version: AtomicI64::new(version),
            }),
        })
    }

    /// Picks up commits made by another connection (another process on the same file, e.g.
    /// `bridle memory index` while the gateway runs): SQLite's `data_version` changes only for
    /// other connections' commits, and then the in-memory copy is reloaded from disk. Readers
    /// call this without waiting: if a write of ours holds the connection, the check is left to
    /// the next call.
    fn sync_external(&self) {
        if let Ok(db) = self.inner.db.try_lock() {
            self.sync_locked(&db);
        }
    }

    fn sync_locked(&self, db: &Connection) {
        let version = match data_version(db) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = ?e.to_string(), "cannot read the store's data version");
                return;
            }
        };
        if version == self.inner.seen_version.load(AtomicOrdering::Acquire) {
            return;
        }
        match load_all(db) {
            Ok(fresh) => {
                let mut map = write(&self.inner.collections);
                map.retain(|name, _| fresh.contains_key(name));
                // A reloaded collection's keyword index is built again by its next hybrid
                // search: the reload read every row already, the rebuild costs the same order.
                for (name, c) in fresh {
                    match map.get(&name) {
                        Some(existing) => *write(existing) = c,
                        None => {
                            map.insert(name, Arc::new(RwLock::new(c)));
                        }
                    }
                }
                self.inner
                    .seen_version
                    .store(version, AtomicOrdering::Release);
                tracing::info!("reloaded the store after changes by another process");
            }
            // Names collections and payload text of the file: written escaped, so a line
            // break in them cannot start a log line.
            Err(e) => {
                tracing::warn!(error = ?e.to_string(), "cannot reload the store after an outside change")
            }
        }
    }

    /// The file this store lives in (`None` for an in-memory store).
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    fn get(&self, name: &str) -> Result<Arc<RwLock<Collection>>> {
        read(&self.inner.collections)
            .get(name)
            .cloned()
            .ok_or_else(|| MemoryError::UnknownCollection(name.to_string()))
    }

    /// Checks dimensions and normalizes for cosine collections; nothing is written on error.
    fn prepare(config: CollectionConfig, points: &mut [Point]) -> Result<()> {
        for p in points.iter_mut() {
            if p.vector.len() != config.dimension {
                return Err(MemoryError::DimensionMismatch {
                    expected: config.dimension,
                    actual: p.vector.len(),
                });
            }
            if p.vector.iter().any(|x| !x.is_finite()) {
                return Err(MemoryError::InvalidInput(format!(
                    "point {} has a vector with a NaN or infinite component",
                    p.id
                )));
            }
            if config.distance == Distance::Cosine {
                normalize(&mut p.vector);
            }
        }
        Ok(())
    }

    fn insert_rows(
        tx: &rusqlite::Transaction<'_>,
        collection: &str,
        points: &[Point],
    ) -> Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO points (collection, id, vector, payload) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for p in points {
            let payload = serde_json::to_string(&p.payload).map_err(|e| {
                MemoryError::InvalidInput(format!("payload does not serialize: {e}"))
            })?;
            stmt.execute(params![
                collection,
                sql_id(p.id),
                to_blob(&p.vector),
                payload
            ])?;
        }
        Ok(())
    }

    fn delete_rows(
        tx: &rusqlite::Transaction<'_>,
        collection: &str,
        ids: &[PointId],
    ) -> Result<()> {
        let mut stmt = tx.prepare_cached("DELETE FROM points WHERE collection = ?1 AND id = ?2")?;
        for id in ids {
            stmt.execute(params![collection, sql_id(*id)])?;
        }
        Ok(())
    }

    /// Creates the collection if missing (synchronous form of [`VectorStore::ensure_collection`]).
    pub fn ensure_collection_sync(&self, name: &str, config: CollectionConfig) -> Result<()> {
        if name.is_empty() {
            return Err(MemoryError::InvalidInput(
                "a collection name must not be empty".into(),
            ));
        }
        if config.dimension == 0 {
            return Err(MemoryError::InvalidInput(
                "a collection needs a dimension of at least 1".into(),
            ));
        }
        let Some(dimension) = vector_bytes(config.dimension).map(|_| config.dimension as i64)
        else {
            return Err(MemoryError::InvalidInput(format!(
                "a collection's dimension must be at most {}",
                i64::MAX / 4
            )));
        };
        let db = lock(&self.inner.db);
        self.sync_locked(&db);
        if let Some(c) = read(&self.inner.collections).get(name) {
            let existing = read(c).config;
            return if existing == config {
                Ok(())
            } else {
                Err(MemoryError::CollectionMismatch {
                    name: name.to_string(),
                    existing: existing.to_string(),
                    requested: config.to_string(),
                })
            };
        }
        db.execute(
            "INSERT INTO collections (name, dimension, distance) VALUES (?1, ?2, ?3)",
            params![name, dimension, config.distance.as_str()],
        )?;
        write(&self.inner.collections).insert(
            name.to_string(),
            Arc::new(RwLock::new(Collection::new(config))),
        );
        Ok(())
    }

    /// The collection's configuration.
    pub fn collection_sync(&self, name: &str) -> Option<CollectionConfig> {
        self.sync_external();
        read(&self.inner.collections)
            .get(name)
            .map(|c| read(c).config)
    }

    /// Deletes a collection (synchronous form).
    pub fn drop_collection_sync(&self, name: &str) -> Result<bool> {
        let mut db = lock(&self.inner.db);
        self.sync_locked(&db);
        let tx = db.transaction()?;
        tx.execute("DELETE FROM points WHERE collection = ?1", params![name])?;
        let n = tx.execute("DELETE FROM collections WHERE name = ?1", params![name])?;
        tx.commit()?;
        write(&self.inner.collections).remove(name);
        Ok(n > 0)
    }

    /// Inserts or replaces points (synchronous form).
    pub fn upsert_sync(&self, collection: &str, mut points: Vec<Point>) -> Result<()> {
        let c = self.get(collection)?;
        let config = read(&c).config;
        Self::prepare(config, &mut points)?;
        let mut db = lock(&self.inner.db);
        self.sync_locked(&db);
        let tx = db.transaction()?;
        Self::insert_rows(&tx, collection, &points)?;
        tx.commit()?;
        let mut c = write(&c);
        for p in points {
            c.put(p.id, &p.vector, Arc::new(p.payload));
        }
        Ok(())
    }

    /// Deletes by filter (synchronous form).
    pub fn delete_sync(&self, collection: &str, filter: &Filter) -> Result<u64> {
        self.replace_sync(collection, filter, Vec::new())
    }

    /// Replaces everything matching `filter` with `points` in one transaction, then in memory
    /// under one write lock (synchronous form of [`VectorStore::replace`]).
    pub fn replace_sync(
        &self,
        collection: &str,
        filter: &Filter,
        mut points: Vec<Point>,
    ) -> Result<u64> {
        let c = self.get(collection)?;
        let config = read(&c).config;
        Self::prepare(config, &mut points)?;
        let mut db = lock(&self.inner.db);
        // The write lock of the database is taken first (`IMMEDIATE`), then what another
        // process committed is loaded: no other writer, in this process (`db`) or another
        // (`bridle memory index`), can change the set computed here before this commits.
        let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        self.sync_locked(&tx);
        let c = self.get(collection)?;
        let old: Vec<PointId> = {
            let c = read(&c);
            c.matching(Some(filter)).map(|i| c.ids[i]).collect()
        };
        Self::delete_rows(&tx, collection, &old)?;
        Self::insert_rows(&tx, collection, &points)?;
        tx.commit()?;
        let mut c = write(&c);
        for id in &old {
            c.remove(*id);
        }
        for p in points {
            c.put(p.id, &p.vector, Arc::new(p.payload));
        }
        Ok(old.len() as u64)
    }

    /// Exact nearest-neighbour search (synchronous form of [`VectorStore::search`]).
    pub fn search_sync(
        &self,
        collection: &str,
        vector: &[f32],
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.sync_external();
        let c = self.get(collection)?;
        let c = read(&c);
        if vector.len() != c.config.dimension {
            return Err(MemoryError::DimensionMismatch {
                expected: c.config.dimension,
                actual: vector.len(),
            });
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        if c.config.distance == Distance::Cosine {
            let mut q = vector.to_vec();
            normalize(&mut q);
            Ok(c.search(&q, filter, limit))
        } else {
            Ok(c.search(vector, filter, limit))
        }
    }

    /// Hybrid search (synchronous form of [`VectorStore::search_hybrid`]).
    pub fn search_hybrid_sync(
        &self,
        collection: &str,
        vector: &[f32],
        text: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.sync_external();
        let c = self.get(collection)?;
        let c = read(&c);
        if vector.len() != c.config.dimension {
            return Err(MemoryError::DimensionMismatch {
                expected: c.config.dimension,
                actual: vector.len(),
            });
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut q = vector.to_vec();
        if c.config.distance == Distance::Cosine {
            normalize(&mut q);
        }
        Ok(c.search_hybrid(&q, text, filter, limit))
    }

    /// Counts points matching `filter` (synchronous form).
    pub fn count_sync(&self, collection: &str, filter: Option<&Filter>) -> Result<u64> {
        self.sync_external();
        let c = self.get(collection)?;
        let c = read(&c);
        Ok(c.matching(filter).count() as u64)
    }

    /// Lists points in id order (synchronous form of [`VectorStore::scroll`]).
    pub fn scroll_sync(
        &self,
        collection: &str,
        filter: Option<&Filter>,
        offset: Option<PointId>,
        limit: usize,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        self.sync_external();
        let c = self.get(collection)?;
        let c = read(&c);
        let mut rows: Vec<usize> = c
            .matching(filter)
            .filter(|&i| offset.is_none_or(|o| c.ids[i] >= o))
            .collect();
        rows.sort_unstable_by_key(|&i| c.ids[i]);
        let next = rows.get(limit).map(|&i| c.ids[i]);
        rows.truncate(limit);
        let records = rows
            .into_iter()
            .map(|i| Record {
                id: c.ids[i],
                payload: Payload::clone(&c.payloads[i]),
            })
            .collect();
        Ok((records, next))
    }

    /// Runs `f` on a blocking thread (SQLite I/O and long scans must not stall the runtime).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(EmbeddedStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(me))
            .await
            .map_err(|e| MemoryError::stopped("the store's worker", &e))?
    }
}

/// Below this many points a search runs inline; above it, on a blocking thread.
const INLINE_SEARCH_POINTS: usize = 4096;

#[async_trait]
impl VectorStore for EmbeddedStore {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    async fn ensure_collection(&self, name: &str, config: CollectionConfig) -> Result<()> {
        let name = name.to_string();
        self.blocking(move |s| s.ensure_collection_sync(&name, config))
            .await
    }

    async fn collection(&self, name: &str) -> Result<Option<CollectionConfig>> {
        Ok(self.collection_sync(name))
    }

    async fn drop_collection(&self, name: &str) -> Result<bool> {
        let name = name.to_string();
        self.blocking(move |s| s.drop_collection_sync(&name)).await
    }

    async fn upsert(&self, collection: &str, points: Vec<Point>) -> Result<()> {
        let name = collection.to_string();
        self.blocking(move |s| s.upsert_sync(&name, points)).await
    }

    async fn delete(&self, collection: &str, filter: &Filter) -> Result<u64> {
        let (name, filter) = (collection.to_string(), filter.clone());
        self.blocking(move |s| s.delete_sync(&name, &filter)).await
    }

    async fn search(
        &self,
        collection: &str,
        vector: &[f32],
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.sync_external();
        let small = read(&*self.get(collection)?).len() <= INLINE_SEARCH_POINTS;
        if small {
            return self.search_sync(collection, vector, filter, limit);
        }
        let (name, vector, filter) = (collection.to_string(), vector.to_vec(), filter.cloned());
        self.blocking(move |s| s.search_sync(&name, &vector, filter.as_ref(), limit))
            .await
    }

    async fn search_hybrid(
        &self,
        collection: &str,
        vector: &[f32],
        text: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.sync_external();
        let (name, vector, text, filter) = (
            collection.to_string(),
            vector.to_vec(),
            text.to_string(),
            filter.cloned(),
        );
        self.blocking(move |s| s.search_hybrid_sync(&name, &vector, &text, filter.as_ref(), limit))
            .await
    }

    async fn count(&self, collection: &str, filter: Option<&Filter>) -> Result<u64> {
        self.count_sync(collection, filter)
    }

    async fn scroll(
        &self,
        collection: &str,
        filter: Option<&Filter>,
        offset: Option<PointId>,
        limit: usize,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        self.scroll_sync(collection, filter, offset, limit)
    }

    async fn replace(&self, collection: &str, filter: &Filter, points: Vec<Point>) -> Result<u64> {
        let (name, filter) = (collection.to_string(), filter.clone());
        self.blocking(move |s| s.replace_sync(&name, &filter, points))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before, a store task that panicked was answered `the store's worker stopped: task N
    /// panicked with message "..."`: the panic's own words, which may quote a stored text, in
    /// the error a tool hands an agent.
    #[tokio::test]
    async fn a_store_task_that_panics_is_answered_without_its_message() {
        const CANARY: &str = "canary-stored-text-77d1";
        let store = EmbeddedStore::open_in_memory().expect("an in-memory store");
        let e = store
            .blocking(|_| -> Result<()> { panic!("{CANARY}") })
            .await
            .expect_err("the task panicked");
        assert_eq!(e.code(), "store");
        let told = e.to_string();
        assert!(!told.contains(CANARY), "{told}");
        assert!(told.contains("internal error"), "{told}");
    }
}
