//! The vector store: the trait every backend implements, and the payload filter language.
//!
//! A store holds named collections; each point has a `u64` id, a vector of the collection's
//! dimension and a JSON object payload. Filters follow Qdrant's model so that moving from the
//! embedded store to a Qdrant server changes nothing for a user: a [`Filter`] has `must`,
//! `should` and `must_not` clauses of [`Condition`]s; a match on a field whose value is an array
//! matches when any element matches; a missing field matches nothing; `should` is satisfied by any
//! one of its conditions (and ignored when empty). [`Filter::matches`] is the reference
//! evaluation, used by the embedded store and by the shared test battery.
//!
//! [`VectorStore::replace`] is the operation pattern-example refresh rests on: everything matching
//! a filter is replaced by a new set of points, and a concurrent search sees the old set or the
//! new one, never a mix and never nothing (see each backend for how it keeps that promise).

pub mod embedded;
pub mod keywords;
#[cfg(feature = "qdrant")]
pub mod qdrant;
mod topk;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{MemoryError, Result};

/// A point id. Qdrant accepts unsigned integers and UUIDs; integers keep every backend alike.
pub type PointId = u64;

/// A point's payload: a JSON object.
pub type Payload = serde_json::Map<String, Value>;

/// How vectors are compared. Scores are "higher is closer" for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    /// Cosine similarity: vectors are normalized on the way in, the score is their dot product.
    Cosine,
    /// The raw dot product.
    Dot,
}

impl Distance {
    /// `cosine` or `dot`.
    pub fn as_str(self) -> &'static str {
        match self {
            Distance::Cosine => "cosine",
            Distance::Dot => "dot",
        }
    }

    /// Parses `cosine` or `dot`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cosine" => Some(Distance::Cosine),
            "dot" => Some(Distance::Dot),
            _ => None,
        }
    }
}

/// A collection's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionConfig {
    /// The vectors' length.
    pub dimension: usize,
    /// How they are compared.
    pub distance: Distance,
}

impl CollectionConfig {
    /// A cosine collection of this dimension (what embedders produce).
    pub fn cosine(dimension: usize) -> Self {
        Self {
            dimension,
            distance: Distance::Cosine,
        }
    }
}

impl std::fmt::Display for CollectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} dimensions, {}",
            self.dimension,
            self.distance.as_str()
        )
    }
}

/// A point to store.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Its id; upserting an existing id replaces that point.
    pub id: PointId,
    /// Its vector.
    pub vector: Vec<f32>,
    /// Its payload.
    pub payload: Payload,
}

/// A search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPoint {
    /// The point's id.
    pub id: PointId,
    /// Its similarity to the query (higher is closer).
    pub score: f32,
    /// Its payload.
    pub payload: Payload,
}

/// A stored point without its vector, as listed by [`VectorStore::scroll`].
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The point's id.
    pub id: PointId,
    /// Its payload.
    pub payload: Payload,
}

/// A value a [`Condition::Match`] compares a payload field with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MatchValue {
    /// A string, compared exactly.
    Keyword(String),
    /// An integer.
    Integer(i64),
    /// A boolean.
    Bool(bool),
}

impl From<&str> for MatchValue {
    fn from(s: &str) -> Self {
        MatchValue::Keyword(s.to_string())
    }
}

impl From<String> for MatchValue {
    fn from(s: String) -> Self {
        MatchValue::Keyword(s)
    }
}

impl From<i64> for MatchValue {
    fn from(i: i64) -> Self {
        MatchValue::Integer(i)
    }
}

impl From<bool> for MatchValue {
    fn from(b: bool) -> Self {
        MatchValue::Bool(b)
    }
}

impl MatchValue {
    fn matches(&self, v: &Value) -> bool {
        match (self, v) {
            (MatchValue::Keyword(s), Value::String(t)) => s == t,
            (MatchValue::Integer(i), Value::Number(n)) => n.as_i64() == Some(*i),
            (MatchValue::Bool(b), Value::Bool(c)) => b == c,
            _ => false,
        }
    }
}

/// One condition of a [`Filter`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Condition {
    /// The field (a key, or a dotted path into nested objects) equals the value, or is an array
    /// holding it.
    Match {
        /// The payload key.
        key: String,
        /// The value.
        value: MatchValue,
    },
    /// The field equals any of the values (Qdrant's `match: {any: [...]}`).
    MatchAny {
        /// The payload key.
        key: String,
        /// The accepted values.
        any: Vec<MatchValue>,
    },
    /// The point's id is one of these.
    HasId(Vec<PointId>),
    /// A nested filter.
    Nested(Box<Filter>),
}

impl Condition {
    /// `key == value`.
    pub fn matches(key: impl Into<String>, value: impl Into<MatchValue>) -> Self {
        Condition::Match {
            key: key.into(),
            value: value.into(),
        }
    }

    fn eval(&self, id: PointId, payload: &Payload) -> bool {
        match self {
            Condition::Match { key, value } => field(payload, key).is_some_and(|v| match v {
                Value::Array(items) => items.iter().any(|i| value.matches(i)),
                v => value.matches(v),
            }),
            Condition::MatchAny { key, any } => field(payload, key).is_some_and(|v| match v {
                Value::Array(items) => items.iter().any(|i| any.iter().any(|a| a.matches(i))),
                v => any.iter().any(|a| a.matches(v)),
            }),
            Condition::HasId(ids) => ids.contains(&id),
            Condition::Nested(f) => f.matches(id, payload),
        }
    }
}

/// Looks a key up, first as is, then as a dotted path into nested objects.
fn field<'a>(payload: &'a Payload, key: &str) -> Option<&'a Value> {
    if let Some(v) = payload.get(key) {
        return Some(v);
    }
    let mut parts = key.split('.');
    let mut cur = payload.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_object()?.get(p)?;
    }
    Some(cur)
}

/// A payload filter, as Qdrant's: every `must` holds, at least one `should` holds (when there
/// are any), no `must_not` holds. The empty filter matches every point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// All of these hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub must: Vec<Condition>,
    /// At least one of these holds (when not empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub should: Vec<Condition>,
    /// None of these holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub must_not: Vec<Condition>,
}

impl Filter {
    /// The empty filter (matches everything).
    pub fn all() -> Self {
        Self::default()
    }

    /// A filter of one `must` condition `key == value`.
    pub fn eq(key: impl Into<String>, value: impl Into<MatchValue>) -> Self {
        Self::default().and(Condition::matches(key, value))
    }

    /// Adds a `must` condition.
    pub fn and(mut self, c: Condition) -> Self {
        self.must.push(c);
        self
    }

    /// Adds a `must` condition `key == value`.
    pub fn and_eq(self, key: impl Into<String>, value: impl Into<MatchValue>) -> Self {
        self.and(Condition::matches(key, value))
    }

    /// Adds a `should` condition.
    pub fn or(mut self, c: Condition) -> Self {
        self.should.push(c);
        self
    }

    /// Adds a `must_not` condition.
    pub fn not(mut self, c: Condition) -> Self {
        self.must_not.push(c);
        self
    }

    /// Whether the filter has no condition.
    pub fn is_empty(&self) -> bool {
        self.must.is_empty() && self.should.is_empty() && self.must_not.is_empty()
    }

    /// Whether a point with this id and payload passes the filter.
    pub fn matches(&self, id: PointId, payload: &Payload) -> bool {
        self.must.iter().all(|c| c.eval(id, payload))
            && (self.should.is_empty() || self.should.iter().any(|c| c.eval(id, payload)))
            && !self.must_not.iter().any(|c| c.eval(id, payload))
    }
}

/// A vector store: named collections of points with payloads.
///
/// Every method takes the collection name; writing to or searching a collection that was never
/// created answers [`crate::MemoryError::UnknownCollection`], and vectors of the wrong length
/// answer [`crate::MemoryError::DimensionMismatch`] without writing anything.
#[async_trait]
pub trait VectorStore: Send + Sync + 'static {
    /// A short name of the backend, for logs (`embedded`, `qdrant`).
    fn backend(&self) -> &'static str;

    /// Creates the collection if it does not exist. An existing collection with another
    /// configuration answers [`crate::MemoryError::CollectionMismatch`].
    async fn ensure_collection(&self, name: &str, config: CollectionConfig) -> Result<()>;

    /// The collection's configuration, if it exists.
    async fn collection(&self, name: &str) -> Result<Option<CollectionConfig>>;

    /// Deletes a collection and its points. Returns whether it existed.
    async fn drop_collection(&self, name: &str) -> Result<bool>;

    /// Inserts or replaces points (all or none).
    async fn upsert(&self, collection: &str, points: Vec<Point>) -> Result<()>;

    /// Deletes the points matching `filter`; returns how many there were.
    async fn delete(&self, collection: &str, filter: &Filter) -> Result<u64>;

    /// The `limit` points closest to `vector` among those matching `filter`, best first.
    async fn search(
        &self,
        collection: &str,
        vector: &[f32],
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>>;

    /// Hybrid search: the `limit` points matching `filter` best by reciprocal rank fusion
    /// ([`keywords::fuse`], weighted) of the vector ranking for `vector` and a BM25 keyword ranking for
    /// `text` over each point's [`keywords::keyword_text`]. Scores are the fused RRF scores
    /// (higher is better; not a similarity).
    async fn search_hybrid(
        &self,
        collection: &str,
        vector: &[f32],
        text: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>>;

    /// How many points match `filter`.
    async fn count(&self, collection: &str, filter: Option<&Filter>) -> Result<u64>;

    /// Points matching `filter` in id order, starting at `offset` (inclusive), at most `limit`;
    /// also returns the id to pass as the next page's offset, if there is a next page.
    async fn scroll(
        &self,
        collection: &str,
        filter: Option<&Filter>,
        offset: Option<PointId>,
        limit: usize,
    ) -> Result<(Vec<Record>, Option<PointId>)>;

    /// Replaces every point matching `filter` with `points`, as one change: a concurrent search
    /// sees the old set or the new one. Returns how many points were removed.
    async fn replace(&self, collection: &str, filter: &Filter, points: Vec<Point>) -> Result<u64>;
}

/// The most pages one listing of a collection follows to its end: 100,000 pages, a hundred
/// million points at 1,000 a page, far past what a deployment of this crate holds. A store still
/// answering next pages past it is not moving through the collection.
pub const MAX_SCROLL_PAGES: usize = 100_000;

/// Where a listing that follows [`VectorStore::scroll`] from the first page to the last stands,
/// and the check of each answer against the contract of `scroll`, so that a store that does not
/// move forward (a Qdrant answering the same `next_page_offset`, or the same page, again) fails
/// the listing with [`MemoryError::Store`] instead of looping forever while its results pile
/// up. Its use, in outline (the type is the crate's own, so this is not a doctest):
///
/// ```text
/// let mut pages = Pages::new(collection);
/// loop {
///     let (page, next) = store.scroll(collection, filter, pages.offset(), 1000).await?;
///     let more = pages.check(&page, next)?;
///     // use `page`
///     if !more { break; }
/// }
/// ```
#[derive(Debug)]
pub(crate) struct Pages {
    collection: String,
    offset: Option<PointId>,
    pages: usize,
    max_pages: usize,
}

impl Pages {
    /// A listing of `collection` from its first page, of at most [`MAX_SCROLL_PAGES`].
    pub(crate) fn new(collection: &str) -> Self {
        Self::with_max(collection, MAX_SCROLL_PAGES)
    }

    /// The same, of at most `max_pages` pages.
    pub(crate) fn with_max(collection: &str, max_pages: usize) -> Self {
        Self {
            collection: collection.to_string(),
            offset: None,
            pages: 0,
            max_pages,
        }
    }

    /// The offset to ask the next page from.
    pub(crate) fn offset(&self) -> Option<PointId> {
        self.offset
    }

    /// Checks the page answered for [`Pages::offset`] and its next offset: whether there is a
    /// next page (the offset has moved to it), or the error that ends a store's listing that
    /// does not advance. Offsets are inclusive and ids come in order, so every id of the page is
    /// at least the offset asked for and a next offset is past all of them; anything else (the
    /// same offset or the same page again, an offset behind, an empty page with a next offset)
    /// would loop.
    pub(crate) fn check(&mut self, page: &[Record], next: Option<PointId>) -> Result<bool> {
        let stuck = |what: String| {
            MemoryError::Store(format!(
                "listing collection `{}` stopped: the store's paging does not advance ({what})",
                self.collection
            ))
        };
        if let Some(offset) = self.offset
            && let Some(behind) = page.iter().find(|r| r.id < offset)
        {
            return Err(stuck(format!(
                "asked for ids from {offset} on, it answered id {}",
                behind.id
            )));
        }
        let Some(next) = next else {
            return Ok(false);
        };
        let Some(last) = page.iter().map(|r| r.id).max() else {
            return Err(stuck(format!("an empty page with the next offset {next}")));
        };
        if next <= last {
            return Err(stuck(format!(
                "the next offset {next} is not past the page it ends (up to id {last})"
            )));
        }
        self.pages += 1;
        if self.pages >= self.max_pages {
            return Err(stuck(format!(
                "still a next page after {} pages",
                self.max_pages
            )));
        }
        self.offset = Some(next);
        Ok(true)
    }
}

/// Normalizes `v` in place to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// The dot product, written so the compiler vectorizes it (16 independent lanes).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let ca = a.chunks_exact(16);
    let cb = b.chunks_exact(16);
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(v: Value) -> Payload {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn filter_semantics_follow_qdrant() {
        let pl = p(json!({"tag": "a", "tags": ["x", "y"], "n": 3, "b": true, "o": {"k": "v"}}));
        assert!(Filter::all().matches(1, &pl));
        assert!(Filter::eq("tag", "a").matches(1, &pl));
        assert!(!Filter::eq("tag", "b").matches(1, &pl));
        assert!(
            Filter::eq("tags", "y").matches(1, &pl),
            "array field: any element"
        );
        assert!(Filter::eq("n", 3i64).matches(1, &pl));
        assert!(!Filter::eq("n", "3").matches(1, &pl), "types do not coerce");
        assert!(Filter::eq("b", true).matches(1, &pl));
        assert!(Filter::eq("o.k", "v").matches(1, &pl), "dotted path");
        assert!(!Filter::eq("missing", "v").matches(1, &pl));
        assert!(
            Filter::all()
                .not(Condition::matches("missing", "v"))
                .matches(1, &pl),
            "must_not on a missing field holds"
        );
        let should = Filter::all()
            .or(Condition::matches("tag", "z"))
            .or(Condition::matches("tag", "a"));
        assert!(should.matches(1, &pl));
        let should_none = Filter::all().or(Condition::matches("tag", "z"));
        assert!(!should_none.matches(1, &pl));
        let any = Filter::all().and(Condition::MatchAny {
            key: "tags".into(),
            any: vec!["q".into(), "x".into()],
        });
        assert!(any.matches(1, &pl));
        assert!(
            Filter::all()
                .and(Condition::HasId(vec![1, 2]))
                .matches(1, &pl)
        );
        assert!(!Filter::all().and(Condition::HasId(vec![2])).matches(1, &pl));
        let nested = Filter::all().and(Condition::Nested(Box::new(Filter::eq("tag", "a"))));
        assert!(nested.matches(1, &pl));
    }

    #[test]
    fn filters_round_trip_as_json() {
        let f = Filter::eq("arch_tag", "mvc").not(Condition::HasId(vec![7]));
        let s = serde_json::to_string(&f).unwrap_or_default();
        let back: Filter = serde_json::from_str(&s).unwrap_or_default();
        assert_eq!(back, f);
    }

    fn page(ids: &[PointId]) -> Vec<Record> {
        ids.iter()
            .map(|&id| Record {
                id,
                payload: Payload::new(),
            })
            .collect()
    }

    #[test]
    fn a_listing_stops_with_an_error_when_paging_does_not_advance() {
        let mut pages = Pages::new("c");
        assert_eq!(pages.offset(), None);
        assert!(pages.check(&page(&[1, 2]), Some(5)).expect("advances"));
        assert_eq!(pages.offset(), Some(5));
        assert!(pages.check(&page(&[5, 7]), Some(9)).expect("advances"));
        assert!(!pages.check(&page(&[9]), None).expect("the last page"));

        let stuck = |pages: &mut Pages, ids: &[PointId], next| {
            let err = pages.check(&page(ids), next).expect_err("stuck");
            assert_eq!(err.code(), "store", "{err}");
            assert!(err.to_string().contains("does not advance"), "{err}");
        };
        // The same offset again.
        let mut pages = Pages::new("c");
        assert!(pages.check(&page(&[1, 2]), Some(3)).expect("advances"));
        stuck(&mut pages, &[3, 4], Some(3));
        // The same page again, with the same next offset.
        let mut pages = Pages::new("c");
        assert!(pages.check(&page(&[1, 2]), Some(3)).expect("advances"));
        stuck(&mut pages, &[1, 2], Some(3));
        // An offset behind, an empty page with a next offset.
        stuck(&mut Pages::new("c"), &[4, 6], Some(5));
        stuck(&mut Pages::new("c"), &[], Some(5));
        // A store that always has a next page, each one further on.
        let mut pages = Pages::with_max("c", 3);
        assert!(pages.check(&page(&[1]), Some(2)).expect("advances"));
        assert!(pages.check(&page(&[2]), Some(3)).expect("advances"));
        stuck(&mut pages, &[3], Some(4));
    }

    #[test]
    fn dot_handles_tails() {
        let a: Vec<f32> = (0..37).map(|i| i as f32).collect();
        let want: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), want);
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
    }
}
