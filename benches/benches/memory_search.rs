//! Vector search: the embedded store against exact brute force, same vectors, same run.
//!
//! 10k and 100k random unit vectors of 384 dimensions (the all-MiniLM-L6-v2 size). The
//! baseline is the obvious exact search (score every vector, sort, take ten). Besides
//! criterion's timings, the run prints for each size the p50 latency of both over 200 queries
//! and the store's recall@10 against the baseline's answers. Goal: p50 <= 5 ms at 100k with
//! recall@10 >= 0.95. Without `--bench` (under `cargo test --benches`) it is a smoke run over
//! one store of 2,000 vectors that fails if recall@10 is below 0.5.

use std::hint::black_box;
use std::time::Instant;

use bridle_memory::{CollectionConfig, EmbeddedStore, Payload, Point};
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

fn bench(c: &mut Criterion) {
    // Without `--bench` (as under `cargo test --benches`) a smoke run: one small store, so an
    // unoptimised build checks the path in seconds, not minutes.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (sizes, query_count): (&[usize], usize) = if smoke {
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

criterion_group!(benches, bench);
criterion_main!(benches);
