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
//! embedded store builds an in-memory [`Bm25Index`] per collection (rebuilt lazily after a
//! write), and Qdrant stores the same terms as a sparse vector ([`sparse_terms`]) whose IDF Qdrant
//! applies itself; both fuse with [`rrf`] here, so the weights are the same on both.
//!
//! Terms: words are split on anything not a letter or digit and on case changes
//! (`parseHeaderValue` → `parse`, `header`, `value`), lower-cased, stop words dropped, and cut
//! by a few English suffix rules (`parsing`, `parsed`, `parses` → `pars`) so a question's words
//! meet the code's; a common abbreviation (`op`, `param`, `req`, `buf`) also counts as the words
//! it stands for.

use std::collections::HashMap;

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

/// A BM25 index over a list of documents (`k1 = 1.2`, `b = 0.75`).
#[derive(Debug, Default)]
pub struct Bm25Index {
    /// term → (document, term frequency)
    postings: HashMap<String, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    average: f32,
}

impl Bm25Index {
    /// Indexes `docs`; document `i` is the `i`-th.
    pub fn build<'a>(docs: impl IntoIterator<Item = &'a str>) -> Self {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut lengths = Vec::new();
        for (i, doc) in docs.into_iter().enumerate() {
            let ts = terms(doc);
            lengths.push(ts.len() as u32);
            let mut tf: HashMap<String, u32> = HashMap::new();
            for t in ts {
                *tf.entry(t).or_default() += 1;
            }
            for (t, n) in tf {
                postings.entry(t).or_default().push((i as u32, n));
            }
        }
        let average = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().map(|l| *l as f32).sum::<f32>() / lengths.len() as f32
        };
        Self {
            postings,
            lengths,
            average,
        }
    }

    /// Documents indexed.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
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
        let mut scores: HashMap<u32, f32> = HashMap::new();
        let mut qterms = terms(query);
        qterms.sort();
        qterms.dedup();
        for t in &qterms {
            let Some(list) = self.postings.get(t) else {
                continue;
            };
            let df = list.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in list {
                let len = self.lengths[doc as usize] as f32;
                let tf = tf as f32;
                let norm =
                    tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len / self.average.max(1.0)));
                *scores.entry(doc).or_default() += idf * norm;
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
