//! Keyword search beside vector search: BM25 over each point's text, and reciprocal rank fusion.
//!
//! An embedding model of MiniLM's size reads meaning but misses exact words: an identifier, an
//! error message, a file name. BM25 finds exactly those, so hybrid search ranks both ways and
//! fuses the two rankings with weighted reciprocal rank fusion (RRF: each list adds
//! `weight / (k + rank)` for every point it ranks; `k = 60`, the value of Cormack et al., 2009),
//! which needs no score calibration between the two. The vector ranking weighs
//! [`VECTOR_WEIGHT`] = 1.5 against the keywords' 1: `benches/benches/memory_retrieval.rs` measured
//! equal weights letting a chunk that BM25 ranks well by its common words push out the one the
//! vector ranked first (figures in `benches/README.md`).
//!
//! What is keyword-searchable: a point's [`keyword_text`], the string payload fields `file_path`,
//! `context` and `text` joined, `context` (the enclosing item names, `impl Store > pub fn load`)
//! [`CONTEXT_REPEATS`] times so an item's own name weighs more than a word in its body (a crude
//! BM25F field weight that needs no second index). Both backends index the same text: the
//! embedded store keeps an in-memory [`Bm25Index`] per collection (built by the first hybrid
//! search, then updated by each write at the cost of the written point's text), and Qdrant
//! stores the same terms as a sparse vector ([`sparse_terms`]) whose IDF Qdrant applies itself;
//! both fuse with [`rrf`] here, so the weights are the same on both.
//!
//! Terms: words are split on anything not a letter or digit and on case changes
//! (`parseHeaderValue` → `parse`, `header`, `value`), lower-cased, stop words dropped, and cut
//! by a few English suffix rules (`parsing`, `parsed`, `parses` → `pars`) so a question's words
//! meet the code's; a common abbreviation (`op`, `param`, `req`, `buf`) also counts as the words
//! it stands for.

use std::collections::HashMap;
use std::sync::Arc;

use super::Payload;

/// The RRF constant.
pub const RRF_K: f32 = 60.0;

/// The weight of the vector ranking in hybrid search's fusion.
pub const VECTOR_WEIGHT: f32 = 1.5;

/// The weight of the BM25 ranking in hybrid search's fusion.
pub const KEYWORD_WEIGHT: f32 = 1.0;

/// The payload fields whose strings are keyword-searchable, in this order.
pub const KEYWORD_FIELDS: [&str; 3] = ["file_path", "context", "text"];

/// How many times `context` is repeated in [`keyword_text`].
pub const CONTEXT_REPEATS: usize = 3;

/// A point's keyword-searchable text: `file_path`, `context` ([`CONTEXT_REPEATS`] times) and
/// `text`, one a line; fields that are missing or not strings are left out.
pub fn keyword_text(payload: &Payload) -> String {
    let mut parts = Vec::new();
    for f in KEYWORD_FIELDS {
        if let Some(v) = payload.get(f).and_then(|v| v.as_str()) {
            let times = if f == "context" { CONTEXT_REPEATS } else { 1 };
            parts.extend(std::iter::repeat_n(v, times));
        }
    }
    parts.join("\n")
}

/// English function words, and the keywords of Rust syntax that say nothing about what code
/// does. Words that are also common method names (`get`, `new`, `set`) are kept: a question
/// asking for "the value of a parameter by its name" is answered by a `fn get`.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "if", "in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "what",
    "when", "where", "which", "who", "why", "with", "let", "mut", "self", "pub", "fn", "use",
    "return", "we", "you", "there", "into", "not", "one", "some", "any",
];

/// Abbreviations common in code across languages, with the words they stand for (both, when
/// two are common). A term found here also counts as its words, in documents and queries alike,
/// so a question about "the operator" meets `fn op` and "a parameter" meets `Params`. Keys are
/// the abbreviations after [`stem`] (`params` → `param`).
const ABBREVIATIONS: &[(&str, &[&str])] = &[
    ("arg", &["argument"]),
    ("attr", &["attribute"]),
    ("buf", &["buffer"]),
    ("cfg", &["configuration"]),
    ("cmp", &["compare"]),
    ("conn", &["connection"]),
    ("ctx", &["context"]),
    ("cur", &["current"]),
    ("del", &["delete"]),
    ("dir", &["directory"]),
    ("dst", &["destination"]),
    ("elem", &["element"]),
    ("env", &["environment"]),
    ("eq", &["equal"]),
    ("err", &["error"]),
    ("expr", &["expression"]),
    ("fmt", &["format"]),
    ("func", &["function"]),
    ("idx", &["index"]),
    ("init", &["initialize"]),
    ("iter", &["iterator"]),
    ("len", &["length"]),
    ("max", &["maximum"]),
    ("min", &["minimum"]),
    ("msg", &["message"]),
    ("num", &["number"]),
    ("obj", &["object"]),
    ("op", &["operator", "operation"]),
    ("opt", &["option"]),
    ("param", &["parameter"]),
    ("pos", &["position"]),
    ("prev", &["previous"]),
    ("ptr", &["pointer"]),
    ("recv", &["receive"]),
    ("ref", &["reference"]),
    ("req", &["request", "requirement"]),
    ("resp", &["response"]),
    ("src", &["source"]),
    ("str", &["string"]),
    ("tmp", &["temporary"]),
    ("val", &["value"]),
    ("var", &["variable"]),
    ("vec", &["vector"]),
];

/// Cuts a few English suffixes so inflections meet (`closing`, `closed`, `closes` → `clos`).
fn stem(word: &str) -> String {
    let w = word;
    let cut = |suffix: &str, min: usize| -> Option<&str> {
        w.strip_suffix(suffix).filter(|r| r.len() >= min)
    };
    let base = if let Some(r) = cut("ies", 3) {
        return format!("{r}y");
    } else if let Some(r) = cut("ing", 3) {
        r
    } else if let Some(r) = cut("ed", 3) {
        r
    } else if let Some(r) = cut("es", 3) {
        r
    } else if !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        cut("s", 3).unwrap_or(w)
    } else {
        w
    };
    base.strip_suffix('e')
        .filter(|r| r.len() >= 3)
        .unwrap_or(base)
        .to_string()
}

/// The search terms of a text.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        // Split camelCase / PascalCase / HTTPServer at case changes.
        let chars: Vec<char> = word.chars().collect();
        let mut start = 0;
        for i in 1..=chars.len() {
            let boundary = i == chars.len()
                || (chars[i].is_uppercase()
                    && (chars[i - 1].is_lowercase()
                        || chars.get(i + 1).is_some_and(|n| n.is_lowercase())
                            && chars[i - 1].is_uppercase()));
            if boundary {
                let part: String = chars[start..i].iter().collect::<String>().to_lowercase();
                start = i;
                if part.len() < 2 || part.chars().all(|c| c.is_ascii_digit()) {
                    continue;
                }
                if STOP_WORDS.contains(&part.as_str()) {
                    continue;
                }
                let term = stem(&part);
                if let Some((_, long)) = ABBREVIATIONS.iter().find(|(a, _)| *a == term) {
                    out.extend(long.iter().map(|w| stem(w)));
                }
                out.push(term);
            }
        }
    }
    out
}

/// A BM25 index over a numbered list of documents (`k1 = 1.2`, `b = 0.75`), kept up to date one
/// document at a time.
///
/// Documents are numbered from 0 with no gaps, like the embedded store's rows: [`Self::put`]
/// replaces document `i` or appends it, [`Self::swap_remove`] moves the last document into the
/// removed one's number. Each costs work in proportion to the documents it touches, not to the
/// index: every document keeps, for each of its distinct terms, where its posting sits in that
/// term's list, so replacing or removing it takes its postings out directly, and renumbering the
/// moved document rewrites only its own postings. The index keeps term ids per document, never
/// the text, and each term's name once. After any sequence of writes it ranks and scores exactly
/// as [`Self::build`] over the same documents does.
#[derive(Debug, Default)]
pub struct Bm25Index {
    /// A term's name → its id, the index into `terms`.
    vocabulary: HashMap<Arc<str>, u32>,
    /// By term id: the term's postings. A term whose last posting goes is taken out of the
    /// vocabulary and its id waits in `free` for the next new term.
    terms: Vec<Term>,
    free: Vec<u32>,
    /// By document: its distinct terms, sorted by id, with where each one's posting is.
    docs: Vec<Vec<DocTerm>>,
    /// By document: its length in terms.
    lengths: Vec<u32>,
    /// The sum of `lengths`, kept as an integer so the average never drifts.
    total_length: u64,
}

/// One term of the vocabulary (or a free id, when `name` is `None`).
#[derive(Debug, Default)]
struct Term {
    name: Option<Arc<str>>,
    postings: Vec<Posting>,
}

/// A document holding a term, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Posting {
    doc: u32,
    tf: u32,
}

/// One of a document's terms and the place of the document's posting in that term's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DocTerm {
    term: u32,
    slot: u32,
}

impl Bm25Index {
    /// Indexes `docs`; document `i` is the `i`-th.
    pub fn build<I>(docs: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut index = Self::default();
        for doc in docs {
            index.put(index.len(), doc.as_ref());
        }
        index
    }

    /// Documents indexed.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Indexes `text` as document `doc`: replaces document `doc` when there is one, appends it
    /// when `doc` is [`Self::len`]. Costs the old and new texts' terms, whatever the index's size.
    ///
    /// # Panics
    ///
    /// When `doc` is greater than [`Self::len`] (documents are numbered without gaps).
    pub fn put(&mut self, doc: usize, text: &str) {
        let len = self.len();
        assert!(doc <= len, "document {doc} put into an index of {len}");
        let entries = if doc < len {
            self.retract(doc)
        } else {
            self.docs.push(Vec::new());
            self.lengths.push(0);
            Vec::new()
        };
        self.insert(doc, text, entries);
    }

    /// Removes document `doc` and gives its number to the last document, as
    /// [`Vec::swap_remove`] does. Costs the removed and moved documents' terms.
    ///
    /// # Panics
    ///
    /// When there is no document `doc`.
    pub fn swap_remove(&mut self, doc: usize) {
        let len = self.len();
        assert!(doc < len, "document {doc} removed from an index of {len}");
        self.retract(doc);
        let last = len - 1;
        if doc != last {
            for e in &self.docs[last] {
                self.terms[e.term as usize].postings[e.slot as usize].doc = doc as u32;
            }
        }
        self.docs.swap_remove(doc);
        self.lengths.swap_remove(doc);
    }

    /// Takes document `doc`'s postings out and leaves it empty (length 0, no terms); answers
    /// its emptied term list for reuse.
    fn retract(&mut self, doc: usize) -> Vec<DocTerm> {
        let mut entries = std::mem::take(&mut self.docs[doc]);
        self.total_length -= u64::from(std::mem::take(&mut self.lengths[doc]));
        for &DocTerm { term, slot } in &entries {
            let t = &mut self.terms[term as usize];
            t.postings.swap_remove(slot as usize);
            if let Some(moved) = t.postings.get(slot as usize) {
                // The list's last posting took this one's place: its document learns where.
                let theirs = &mut self.docs[moved.doc as usize];
                let k = theirs
                    .binary_search_by_key(&term, |e| e.term)
                    .expect("a posting's document lists the posting's term");
                theirs[k].slot = slot;
            }
            if t.postings.is_empty() {
                // No document holds the term any more: it leaves the vocabulary.
                if let Some(name) = t.name.take() {
                    self.vocabulary.remove(&*name);
                }
                t.postings = Vec::new();
                self.free.push(term);
            } else if t.postings.capacity() > 16 && t.postings.len() * 4 <= t.postings.capacity() {
                // A list that was long once does not keep its memory.
                t.postings.shrink_to(t.postings.len() * 2);
            }
        }
        entries.clear();
        entries
    }

    /// Adds the postings of `text` as document `doc`, which holds none.
    fn insert(&mut self, doc: usize, text: &str, mut entries: Vec<DocTerm>) {
        let mut ts = terms(text);
        let length = ts.len() as u32;
        ts.sort_unstable();
        for run in ts.chunk_by(|a, b| a == b) {
            let term = self.term_id(&run[0]);
            let postings = &mut self.terms[term as usize].postings;
            entries.push(DocTerm {
                term,
                slot: postings.len() as u32,
            });
            postings.push(Posting {
                doc: doc as u32,
                tf: run.len() as u32,
            });
        }
        entries.sort_unstable_by_key(|e| e.term);
        self.docs[doc] = entries;
        self.lengths[doc] = length;
        self.total_length += u64::from(length);
    }

    /// The id of a term, added to the vocabulary when new.
    fn term_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.vocabulary.get(name) {
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.terms.push(Term::default());
                (self.terms.len() - 1) as u32
            }
        };
        self.terms[id as usize].name = Some(Arc::clone(&name));
        self.vocabulary.insert(name, id);
        id
    }

    /// The average document length. From the integer total, the quotient rounded once (an `f64`
    /// quotient rounded to `f32` is the exactly rounded `f32` one): the same value however the
    /// documents came and went.
    fn average_length(&self) -> f32 {
        if self.lengths.is_empty() {
            0.0
        } else {
            (self.total_length as f64 / self.lengths.len() as f64) as f32
        }
    }

    /// The `limit` best documents for `query` among those `keep` accepts, best first, with
    /// their BM25 scores. Documents sharing no term with the query are not returned.
    pub fn search(
        &self,
        query: &str,
        keep: impl Fn(usize) -> bool,
        limit: usize,
    ) -> Vec<(usize, f32)> {
        let (k1, b) = (1.2f32, 0.75f32);
        let n = self.lengths.len() as f32;
        let average = self.average_length();
        let mut scores: HashMap<u32, f32> = HashMap::new();
        let mut qterms = terms(query);
        qterms.sort();
        qterms.dedup();
        // A document's score adds its terms in the query's sorted order, whatever the order of
        // the postings: the same sum, bit for bit, however the index was written.
        for t in &qterms {
            let Some(&id) = self.vocabulary.get(t.as_str()) else {
                continue;
            };
            let list = &self.terms[id as usize].postings;
            let df = list.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for p in list {
                let len = self.lengths[p.doc as usize] as f32;
                let tf = p.tf as f32;
                let norm = tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len / average.max(1.0)));
                *scores.entry(p.doc).or_default() += idf * norm;
            }
        }
        let mut hits: Vec<(usize, f32)> = scores
            .into_iter()
            .map(|(d, s)| (d as usize, s))
            .filter(|(d, _)| keep(*d))
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(limit);
        hits
    }
}

/// Weighted reciprocal rank fusion of rankings (each best first, with its weight): every key
/// gets `Σ weight / (k + rank)` over the lists that rank it (rank from 1, `k` = [`RRF_K`]). Best
/// first; ties keep the order in which the lists first named them.
pub fn rrf<K: Copy + Eq + std::hash::Hash>(lists: &[(&[K], f32)], limit: usize) -> Vec<(K, f32)> {
    let mut score: HashMap<K, (f32, usize)> = HashMap::new();
    let mut order = 0usize;
    for (list, weight) in lists {
        for (rank, key) in list.iter().enumerate() {
            let e = score.entry(*key).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            e.0 += weight / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut out: Vec<(K, f32, usize)> = score.into_iter().map(|(k, (s, o))| (k, s, o)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    out.into_iter()
        .take(limit)
        .map(|(k, s, _)| (k, s))
        .collect()
}

/// Hybrid search's fusion: the vector ranking and the keyword ranking with their weights
/// ([`VECTOR_WEIGHT`], [`KEYWORD_WEIGHT`]); what both stores call.
pub fn fuse<K: Copy + Eq + std::hash::Hash>(
    by_vector: &[K],
    by_keywords: &[K],
    limit: usize,
) -> Vec<(K, f32)> {
    rrf(
        &[(by_vector, VECTOR_WEIGHT), (by_keywords, KEYWORD_WEIGHT)],
        limit,
    )
}

/// How many candidates each ranking contributes to a fusion returning `limit`.
pub fn candidates(limit: usize) -> usize {
    (limit * 4).max(50)
}

/// A text's terms as a sparse vector for Qdrant: `(term id, term frequency)`, ids from a stable
/// 32-bit FNV-1a hash of the term, sorted by id. Qdrant's IDF modifier turns frequencies into
/// BM25-like weights on its side.
pub fn sparse_terms(text: &str) -> Vec<(u32, f32)> {
    let mut tf: HashMap<u32, f32> = HashMap::new();
    for t in terms(text) {
        let mut h: u32 = 0x811c_9dc5;
        for b in t.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        *tf.entry(h).or_default() += 1.0;
    }
    let mut v: Vec<(u32, f32)> = tf.into_iter().collect();
    v.sort_by_key(|(i, _)| *i);
    v
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn terms_split_identifiers_and_meet_inflections() {
        assert_eq!(terms("parseHeaderValue"), vec!["pars", "header", "valu"]);
        assert_eq!(terms("HTTPServer closing"), vec!["http", "server", "clos"]);
        assert_eq!(terms("close_connection()"), vec!["clos", "connection"]);
        assert_eq!(terms("how does the parser work"), vec!["parser", "work"]);
        assert_eq!(terms("entries"), vec!["entry"]);
    }

    #[test]
    fn abbreviations_count_as_their_words() {
        assert_eq!(terms("fn op"), vec!["operator", "operation", "op"]);
        assert_eq!(terms("Params"), vec!["parameter", "param"]);
        assert_eq!(
            terms("the comparison operator"),
            vec!["comparison", "operator"]
        );
        // A question's word meets the abbreviation in code.
        let idx = Bm25Index::build(["fn op(input: &str)", "fn version(input: &str)"]);
        assert_eq!(idx.search("read the operator", |_| true, 10)[0].0, 0);
    }

    #[test]
    fn bm25_prefers_rare_matching_terms() {
        let docs = [
            "fn parse_header(line: &str) -> Header",
            "fn write_body(out: &mut Vec<u8>)",
            "the header of the body of the header",
            "nothing to see",
        ];
        let idx = Bm25Index::build(docs);
        let hits = idx.search("parse a header", |_| true, 10);
        assert_eq!(hits[0].0, 0);
        assert!(hits.iter().all(|(d, _)| *d != 3 && *d != 1));
        let filtered = idx.search("parse a header", |d| d != 0, 10);
        assert_eq!(filtered[0].0, 2);
        assert!(idx.search("zebra", |_| true, 10).is_empty());
    }

    impl Bm25Index {
        /// Every term's postings by name, each list sorted by document: what two indexes of the
        /// same documents share, whatever order they were written in.
        fn postings_by_name(&self) -> BTreeMap<&str, Vec<(u32, u32)>> {
            self.vocabulary
                .iter()
                .map(|(name, &id)| {
                    let mut list: Vec<(u32, u32)> = self.terms[id as usize]
                        .postings
                        .iter()
                        .map(|p| (p.doc, p.tf))
                        .collect();
                    list.sort_unstable();
                    (&**name, list)
                })
                .collect()
        }

        /// Panics unless the structure holds together: every posting is listed by its
        /// document at its place and the other way round, no term without postings stays in
        /// the vocabulary, and the total length is the lengths' sum.
        fn check(&self) {
            assert_eq!(self.docs.len(), self.lengths.len());
            let sum: u64 = self.lengths.iter().map(|l| u64::from(*l)).sum();
            assert_eq!(
                self.total_length, sum,
                "the total length is the lengths' sum"
            );
            let mut live = 0;
            for (id, t) in self.terms.iter().enumerate() {
                match &t.name {
                    Some(name) => {
                        live += 1;
                        assert_eq!(self.vocabulary.get(&**name), Some(&(id as u32)));
                        assert!(!t.postings.is_empty(), "`{name}` stays with no posting");
                        assert!(t.postings.len() <= self.len());
                    }
                    None => {
                        assert!(t.postings.is_empty() && self.free.contains(&(id as u32)));
                    }
                }
                for (slot, p) in t.postings.iter().enumerate() {
                    let entries = &self.docs[p.doc as usize];
                    let k = entries
                        .binary_search_by_key(&(id as u32), |e| e.term)
                        .expect("the posting's document lists the term");
                    assert_eq!(
                        entries[k].slot as usize, slot,
                        "term {id}, document {}",
                        p.doc
                    );
                }
            }
            assert_eq!(self.vocabulary.len(), live);
            assert_eq!(self.free.len() + live, self.terms.len());
            let mut entries = 0;
            for doc in &self.docs {
                assert!(doc.windows(2).all(|w| w[0].term < w[1].term));
                for e in doc {
                    let t = &self.terms[e.term as usize];
                    assert!(t.name.is_some(), "a document lists a free term");
                    assert!(t.postings.get(e.slot as usize).is_some());
                }
                entries += doc.len();
            }
            let postings: usize = self.terms.iter().map(|t| t.postings.len()).sum();
            assert_eq!(
                postings, entries,
                "one posting per distinct term of each document"
            );
        }
    }

    /// A deterministic generator (xorshift64*), so a failing sequence replays.
    struct Xorshift(u64);

    impl Xorshift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Words for random documents: inflections and abbreviations that meet, camel case, stop
    /// words (a document of only those has length 0).
    const WORDS: &[&str] = &[
        "parse",
        "parseHeaderValue",
        "header",
        "headers",
        "value",
        "buf",
        "buffer",
        "req",
        "request",
        "Params",
        "closing",
        "closed",
        "connection",
        "HTTPServer",
        "entries",
        "op",
        "operator",
        "idx",
        "index",
        "len",
        "load",
        "store",
        "write_body",
        "zebra",
        "the",
        "fn",
        "self",
        "of",
    ];

    const QUERIES: &[&str] = &[
        "parse the header value",
        "buffer",
        "request params",
        "how is the connection closed",
        "operator index length",
        "zebra store load write",
        "fn self of",
        "unique3 unique17 header",
    ];

    /// Up to eight words, and now and then one of fifty rare ones, so terms come and go.
    fn random_text(rng: &mut Xorshift) -> String {
        let mut words: Vec<String> = (0..rng.below(9))
            .map(|_| WORDS[rng.below(WORDS.len())].to_string())
            .collect();
        if rng.below(3) == 0 {
            words.push(format!("unique{}", rng.below(50)));
        }
        words.join(" ")
    }

    fn bits(hits: Vec<(usize, f32)>) -> Vec<(usize, u32)> {
        hits.into_iter().map(|(d, s)| (d, s.to_bits())).collect()
    }

    #[test]
    fn writes_one_at_a_time_answer_as_a_fresh_build() {
        let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15);
        let mut index = Bm25Index::default();
        // The documents in the index's numbering, changed the way the embedded store's rows are.
        let mut docs: Vec<String> = Vec::new();
        let (mut appends, mut overwrites, mut removals, mut emptied) = (0, 0, 0, 0);
        for step in 0..3_000 {
            // Phases of growth and of shrinking, so the index is sometimes large, sometimes empty.
            let grow = (step / 300) % 2 == 0;
            let put = docs.is_empty() || rng.below(4) < if grow { 3 } else { 1 };
            if put {
                let text = random_text(&mut rng);
                let doc = if docs.is_empty() || rng.below(2) == 0 {
                    appends += 1;
                    docs.push(text.clone());
                    docs.len() - 1
                } else {
                    overwrites += 1;
                    let doc = rng.below(docs.len());
                    docs[doc] = text.clone();
                    doc
                };
                index.put(doc, &text);
            } else {
                removals += 1;
                let doc = rng.below(docs.len());
                docs.swap_remove(doc);
                index.swap_remove(doc);
                emptied += usize::from(docs.is_empty());
            }
            index.check();
            let fresh = Bm25Index::build(&docs);
            assert_eq!(index.len(), fresh.len());
            assert_eq!(index.total_length, fresh.total_length, "step {step}");
            assert_eq!(
                index.postings_by_name(),
                fresh.postings_by_name(),
                "step {step}: the same postings, and no others"
            );
            for q in QUERIES {
                assert_eq!(
                    bits(index.search(q, |_| true, usize::MAX)),
                    bits(fresh.search(q, |_| true, usize::MAX)),
                    "step {step}, query {q:?}"
                );
                assert_eq!(
                    bits(index.search(q, |d| d % 3 != 0, 4)),
                    bits(fresh.search(q, |d| d % 3 != 0, 4)),
                    "step {step}, query {q:?}, filtered"
                );
            }
        }
        // The sequence did what it is meant to test.
        assert!(appends > 500 && overwrites > 500 && removals > 500 && emptied > 0);
    }

    #[test]
    fn removals_leave_no_postings_behind() {
        let mut index = Bm25Index::default();
        for round in 0..300 {
            // One document rewritten with new words each round, twenty added and removed again
            // from the front (each removal moves the last one forward).
            index.put(0, &format!("header word{round} token{round}"));
            for i in 1..=20 {
                index.put(i, &format!("header body{i} round{round}"));
            }
            for _ in 0..20 {
                index.swap_remove(1);
            }
            index.check();
            assert_eq!(index.len(), 1);
            assert_eq!(
                index.postings_by_name().into_keys().collect::<Vec<_>>(),
                vec![
                    "header".to_string(),
                    format!("token{round}"),
                    format!("word{round}")
                ]
            );
            // Freed term ids are reused: the table is as large as the most terms ever live.
            assert!(index.terms.len() <= 24, "{} term ids", index.terms.len());
        }
        // A long list that shrinks gives its memory back.
        for i in 1..=1_000 {
            index.put(i, &format!("header x{i}"));
        }
        while index.len() > 1 {
            index.swap_remove(0);
        }
        index.check();
        let header = index.vocabulary["header"] as usize;
        assert_eq!(index.terms[header].postings.len(), 1);
        assert!(index.terms[header].postings.capacity() < 64);
        // And an empty index holds nothing.
        index.swap_remove(0);
        index.check();
        assert!(index.is_empty() && index.vocabulary.is_empty() && index.total_length == 0);
        assert!(index.search("header", |_| true, 10).is_empty());
    }

    #[test]
    #[should_panic(expected = "document 2 put into an index of 1")]
    fn documents_are_numbered_without_gaps() {
        let mut index = Bm25Index::build(["header"]);
        index.put(2, "body");
    }

    #[test]
    fn rrf_rewards_agreement() {
        let fused = rrf(&[(&[1, 2, 3], 1.0), (&[3, 1, 4], 1.0)], 10);
        assert_eq!(fused[0].0, 1);
        assert_eq!(fused[1].0, 3);
        assert_eq!(fused.len(), 4);
        assert!((fused[0].1 - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-6);
        assert_eq!(rrf(&[(&[1, 2, 3], 1.0)], 2).len(), 2);
    }

    #[test]
    fn the_heavier_list_wins_a_disagreement() {
        // The vector ranking's first is the keywords' second and the other way round.
        let fused = fuse(&[7, 8], &[8, 7], 10);
        assert_eq!(fused[0].0, 7);
        let w = VECTOR_WEIGHT / 61.0 + KEYWORD_WEIGHT / 62.0;
        assert!((fused[0].1 - w).abs() < 1e-6);
        // A point only one list ranks still counts.
        assert_eq!(fuse(&[1], &[], 10), vec![(1, VECTOR_WEIGHT / 61.0)]);
    }

    #[test]
    fn the_context_weighs_more_than_the_body() {
        let mut p = Payload::new();
        p.insert("file_path".into(), serde_json::json!("src/a.rs"));
        p.insert("context".into(), serde_json::json!("fn load"));
        p.insert("text".into(), serde_json::json!("fn load() {}"));
        p.insert("start_line".into(), serde_json::json!(3));
        assert_eq!(
            keyword_text(&p),
            "src/a.rs\nfn load\nfn load\nfn load\nfn load() {}"
        );
        p.remove("context");
        assert_eq!(keyword_text(&p), "src/a.rs\nfn load() {}");
    }

    #[test]
    fn sparse_terms_count_repeats() {
        let v = sparse_terms("header header body");
        assert_eq!(v.len(), 2);
        assert!(v.iter().any(|(_, w)| *w == 2.0));
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
