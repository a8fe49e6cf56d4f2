//! Vector search: the embedded store against exact brute force, same vectors, same run.
//!
//! 10k and 100k random unit vectors of 384 dimensions (the all-MiniLM-L6-v2 size). The
//! baseline is the obvious exact search (score every vector, sort, take ten). Besides
//! criterion's timings, the run prints for each size the p50 latency of both over 200 queries
//! and the store's recall@10 against the baseline's answers. Goal: p50 <= 5 ms at 100k with
//! recall@10 >= 0.95. Without `--bench` (under `cargo test --benches`) it is a smoke run over
//! one store of 2,000 vectors that fails if recall@10 is below 0.5.
//!
//! Remember then recall (group `memory_remember_recall`): on a store of 1,000 and 10,000 short
//! code-like texts, one new point is upserted and a hybrid search asks for its words, as an
//! agent's `remember` then `recall` do. The store updates its BM25 index with the new point's
//! text only; the baseline step adds what each step cost before the index was incremental, a
//! `Bm25Index::build` over every point's keyword text. The point is deleted again outside the
//! timing, so the store keeps its size. The run prints the p50 of both steps (interleaved) and
//! their ratio; every step checks the remembered point is the first hit. The smoke run uses one
//! store of 200 texts.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bridle_memory::store::keywords::{Bm25Index, keyword_text};
use bridle_memory::{CollectionConfig, Condition, EmbeddedStore, Filter, Payload, Point};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const DIM: usize = 384;
const K: usize = 10;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn below(&mut self, n: usize) -> usize {
        self.next();
        ((self.0 >> 33) % n as u64) as usize
    }

    fn unit(&mut self) -> Vec<f32> {
        let mut v: Vec<f32> = (0..DIM).map(|_| self.next()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
}

/// The baseline: score everything, sort, take the top ten.
fn brute_force(vectors: &[Vec<f32>], q: &[f32]) -> Vec<u64> {
    let mut scored: Vec<(f32, u64)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (v.iter().zip(q).map(|(a, b)| a * b).sum::<f32>(), i as u64))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.truncate(K);
    scored.into_iter().map(|(_, i)| i).collect()
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Without `--bench` (as under `cargo test --benches`) a smoke run: small stores, so an
/// unoptimised build checks the paths in seconds, not minutes.
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn bench(c: &mut Criterion) {
    let (sizes, query_count): (&[usize], usize) = if smoke() {
        (&[2_000], 20)
    } else {
        (&[10_000, 100_000], 200)
    };
    let mut group = c.benchmark_group("memory_search");
    group.sample_size(20);
    for &n in sizes {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ n as u64);
        let vectors: Vec<Vec<f32>> = (0..n).map(|_| rng.unit()).collect();
        let store = EmbeddedStore::open_in_memory().expect("store");
        store
            .ensure_collection_sync("bench", CollectionConfig::cosine(DIM))
            .expect("collection");
        for (start, chunk) in vectors.chunks(10_000).enumerate() {
            let points = chunk
                .iter()
                .enumerate()
                .map(|(i, v)| Point {
                    id: (start * 10_000 + i) as u64,
                    vector: v.clone(),
                    payload: Payload::new(),
                })
                .collect();
            store.upsert_sync("bench", points).expect("upsert");
        }
        let queries: Vec<Vec<f32>> = (0..query_count).map(|_| rng.unit()).collect();

        // p50 and recall@10, same queries for both.
        let (mut t_store, mut t_brute, mut hits) = (Vec::new(), Vec::new(), 0usize);
        for q in &queries {
            let t = Instant::now();
            let got = store.search_sync("bench", q, None, K).expect("search");
            t_store.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let want = brute_force(&vectors, q);
            t_brute.push(t.elapsed().as_secs_f64() * 1e3);
            hits += got.iter().filter(|h| want.contains(&h.id)).count();
        }
        eprintln!(
            "memory_search n={n}: embedded p50 {:.2} ms, brute force p50 {:.2} ms, ratio {:.2}x, recall@10 {:.3}",
            p50(t_store.clone()),
            p50(t_brute.clone()),
            p50(t_brute) / p50(t_store),
            hits as f64 / (queries.len() * K) as f64
        );
        assert!(
            hits * 2 > queries.len() * K,
            "recall@10 below 0.5 at n={n}: the store does not find the nearest neighbours"
        );

        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("embedded", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                black_box(
                    store
                        .search_sync("bench", &queries[i], None, K)
                        .expect("search"),
                )
            })
        });
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("brute_force", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                black_box(brute_force(&vectors, &queries[i]))
            })
        });
    }
    group.finish();
}

const VERBS: &[&str] = &[
    "parse", "read", "write", "load", "store", "open", "close", "send", "receive", "encode",
    "decode", "merge", "split", "find", "insert", "remove", "update", "check", "build", "flush",
];
const NOUNS: &[&str] = &[
    "header", "body", "frame", "buffer", "request", "response", "session", "token", "config",
    "path", "index", "chunk", "record", "entry", "stream", "socket", "cache", "query", "schema",
    "payload",
];
const TYPES: &[&str] = &[
    "u8", "str", "String", "Vec<u8>", "Bytes", "Path", "Value", "Error", "Header", "Frame",
];

/// A short code-like text whose function name holds the rare word `handle{k}`.
fn code_text(rng: &mut Rng, k: usize) -> String {
    let mut pick = |words: &[&'static str]| words[rng.below(words.len())];
    let (verb, noun, arg, ty, out, call) = (
        pick(VERBS),
        pick(NOUNS),
        pick(NOUNS),
        pick(TYPES),
        pick(TYPES),
        pick(VERBS),
    );
    format!(
        "fn {verb}_{noun}_handle{k}(&mut self, {arg}: &{ty}) -> Result<{out}> {{\n    \
         let {noun} = self.{call}_{arg}({arg})?;\n    Ok({noun}.into())\n}}"
    )
}

fn payload(text: String) -> Payload {
    let mut p = Payload::new();
    p.insert("text".into(), serde_json::Value::String(text));
    p
}

/// One remember-then-recall step of the store: upsert a new point, then a hybrid search for
/// its words, which must find it first. With `rebuild`, the step also builds a BM25 index over
/// every point's keyword text, which the store did on the first hybrid search after each write
/// before its index was kept up to date. The point is deleted after the timing.
struct Step<'a> {
    store: &'a EmbeddedStore,
    /// The store's payloads, for the rebuild; the step's point is pushed and popped.
    payloads: Vec<Payload>,
    rng: Rng,
    next_id: u64,
}

impl Step<'_> {
    fn run(&mut self, rebuild: bool) -> Duration {
        let id = self.next_id;
        self.next_id += 1;
        let text = code_text(&mut self.rng, id as usize);
        let vector = self.rng.unit();
        let query = format!("where does handle{id} {}", NOUNS[id as usize % NOUNS.len()]);
        if rebuild {
            self.payloads.push(payload(text.clone()));
        }
        let t = Instant::now();
        self.store
            .upsert_sync(
                "recall",
                vec![Point {
                    id,
                    vector: vector.clone(),
                    payload: payload(text),
                }],
            )
            .expect("remember");
        if rebuild {
            black_box(Bm25Index::build(self.payloads.iter().map(keyword_text)));
        }
        let hits = self
            .store
            .search_hybrid_sync("recall", &vector, &query, None, K)
            .expect("recall");
        let spent = t.elapsed();
        assert_eq!(hits[0].id, id, "the remembered point comes first");
        if rebuild {
            self.payloads.pop();
        }
        self.store
            .delete_sync("recall", &Filter::all().and(Condition::HasId(vec![id])))
            .expect("forget");
        spent
    }
}

fn remember_recall(c: &mut Criterion) {
    let (sizes, steps): (&[usize], usize) = if smoke() {
        (&[200], 3)
    } else {
        (&[1_000, 10_000], 60)
    };
    let mut group = c.benchmark_group("memory_remember_recall");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for &n in sizes {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ n as u64);
        let store = EmbeddedStore::open_in_memory().expect("store");
        store
            .ensure_collection_sync("recall", CollectionConfig::cosine(DIM))
            .expect("collection");
        let payloads: Vec<Payload> = (0..n).map(|k| payload(code_text(&mut rng, k))).collect();
        let points = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| Point {
                id: i as u64,
                vector: rng.unit(),
                payload: p.clone(),
            })
            .collect();
        store.upsert_sync("recall", points).expect("upsert");
        let mut step = Step {
            store: &store,
            payloads,
            rng,
            next_id: n as u64,
        };
        // The first hybrid search builds the store's index; from then on writes update it.
        step.run(false);

        let (mut t_incremental, mut t_rebuild) = (Vec::new(), Vec::new());
        for _ in 0..steps {
            t_incremental.push(step.run(false).as_secs_f64() * 1e3);
            t_rebuild.push(step.run(true).as_secs_f64() * 1e3);
        }
        eprintln!(
            "memory_remember_recall n={n}: incremental p50 {:.3} ms, rebuild p50 {:.3} ms, ratio {:.1}x",
            p50(t_incremental.clone()),
            p50(t_rebuild.clone()),
            p50(t_rebuild) / p50(t_incremental)
        );

        for (name, rebuild) in [("incremental", false), ("rebuild", true)] {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| (0..iters).map(|_| step.run(rebuild)).sum())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, remember_recall);
criterion_main!(benches);
