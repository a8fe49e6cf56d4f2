//! The memory tools' refusals, served without the gateway (on a kberg-core registry, as
//! `tools::register` sets them up), have kberg-core's one shape: an error result whose structured
//! content holds `code`, `message`, `tool` and `retryable` (true only where the same call may
//! succeed later unchanged: an embedding service that is down, a repository host away or
//! failing), plus the code's own details.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bridle_memory::tools::{MemoryTools, ProjectAccess, register};
use bridle_memory::{EmbeddedStore, Embedder, PatternIndex, SessionMemory, VectorStore};
use common::{FaultyEmbedder, HashingEmbedder};
use kberg_core::{CallOptions, Caller, Grants, Principal, ToolRegistry};
use serde_json::{Value, json};

/// Project `alpha` only, and no memories written there.
struct AlphaReadOnly;

impl ProjectAccess for AlphaReadOnly {
    fn allows(&self, _caller: &Caller, project: &str) -> bool {
        project == "alpha"
    }

    fn may_write(&self, _caller: &Caller, _project: &str) -> bool {
        false
    }
}

fn registry(embedder: Arc<dyn Embedder>, access: Option<Arc<dyn ProjectAccess>>) -> ToolRegistry {
    let store: Arc<dyn VectorStore> = Arc::new(EmbeddedStore::open_in_memory().expect("store"));
    let registry = ToolRegistry::new();
    register(
        &registry,
        MemoryTools {
            session: Arc::new(SessionMemory::new(store.clone(), embedder.clone())),
            patterns: Arc::new(PatternIndex::new(store, embedder)),
            on_indexed: None,
            access,
        },
    )
    .expect("register");
    registry
}

/// Calls `tool`, checks it is refused with `code` in the one shape, that `retryable` says
/// `retryable`, and returns the refusal's structured content.
async fn refused(
    registry: &ToolRegistry,
    tool: &str,
    args: Value,
    code: &str,
    retryable: bool,
) -> Value {
    let caller = Caller::new(
        Principal::new("agent").with_grants(Grants::of(["memory.write", "memory.index"])),
    );
    let out = registry
        .call(&caller, tool, args, CallOptions::default())
        .await
        .expect("the gate lets it through");
    assert!(out.is_error, "{}", out.all_text());
    let s = out.structured.expect("structured content");
    assert_eq!(s["code"], code, "{s}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()), "{s}");
    assert_eq!(s["tool"], tool, "{s}");
    assert_eq!(s["retryable"], retryable, "{s}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_each_memory_tool_has_the_one_shape() {
    let restricted = registry(
        Arc::new(HashingEmbedder::new(64)),
        Some(Arc::new(AlphaReadOnly)),
    );
    refused(
        &restricted,
        "recall",
        json!({"query": "database", "project": "beta"}),
        "project_not_allowed",
        false,
    )
    .await;
    let s = refused(
        &restricted,
        "remember",
        json!({"kind": "decision", "text": "Alpha uses SQLite.", "project": "alpha"}),
        "capability_required",
        false,
    )
    .await;
    assert_eq!(s["capability"], "memory.write", "{s}");

    let open = registry(Arc::new(HashingEmbedder::new(64)), None);
    refused(
        &open,
        "search_pattern_examples",
        json!({"query": "   "}),
        "invalid_input",
        false,
    )
    .await;
    refused(
        &open,
        "refresh_pattern_example",
        json!({"reference_tag": "never-indexed"}),
        "unknown_tag",
        false,
    )
    .await;

    // An embedding service that is down: the same call may work once it is back.
    let faulty = Arc::new(FaultyEmbedder::new(Arc::new(HashingEmbedder::new(64))));
    faulty.down.store(true, Ordering::SeqCst);
    let down = registry(faulty, None);
    refused(
        &down,
        "remember",
        json!({"kind": "decision", "text": "Alpha uses SQLite.", "project": "alpha"}),
        "embedder_unavailable",
        true,
    )
    .await;
}

/// A loopback HTTP server answering every request with `status` (and a Basic challenge for a
/// 401), as a git host that refuses a clone; its address, and the task to abort.
async fn answering(status: u16) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = axum::Router::new().fallback(move || async move {
        (
            axum::http::StatusCode::from_u16(status).expect("a status"),
            [("www-authenticate", "Basic realm=\"private\"")],
            "no",
        )
    });
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (addr, server)
}

/// `repo_unavailable` is retryable only where the same call may work later: a host away or
/// failing (refused connection, 5xx). A repository that does not exist, a local folder that is
/// gone, a host that refuses the credential (or asks for one none is kept for) and a source
/// whose credential was not stored need a person to change something first: retrying them
/// unchanged would fail forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repo_unavailable_is_retryable_only_for_a_passing_failure() {
    use bridle_memory::tools::retryable;
    use bridle_memory::{ExampleRepo, NoProgress};

    let store: Arc<dyn VectorStore> = Arc::new(EmbeddedStore::open_in_memory().expect("store"));
    let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::new(64));
    let patterns = Arc::new(PatternIndex::new(store.clone(), embedder.clone()));
    let index = |url: String| {
        let patterns = Arc::clone(&patterns);
        async move {
            let repo = ExampleRepo {
                url,
                reference_tag: "example".into(),
                arch_tag: "mvc".into(),
            };
            patterns
                .index(&repo, &NoProgress)
                .await
                .map(|_| ())
                .expect_err("the repository cannot be fetched")
        }
    };

    // Passing: nothing listens (port 1 of the loopback), a host answering 503.
    let e = index("http://127.0.0.1:1/team/app.git".into()).await;
    assert_eq!(e.code(), "repo_unavailable", "{e}");
    assert!(retryable(&e), "a host away may be back: {e}");
    let (addr, server) = answering(503).await;
    let e = index(format!("http://{addr}/team/app.git")).await;
    server.abort();
    assert_eq!(e.code(), "repo_unavailable", "{e}");
    assert!(retryable(&e), "a failing host may recover: {e}");

    // Lasting: a host that answers 404, 403 or 401 (no credential kept for it).
    for status in [404, 403, 401] {
        let (addr, server) = answering(status).await;
        let e = index(format!("http://{addr}/team/app.git")).await;
        server.abort();
        assert_eq!(e.code(), "repo_unavailable", "{status}: {e}");
        assert!(!retryable(&e), "{status} stays until a person acts: {e}");
    }
    // Lasting: no repository at a `file://` URL, no such local folder.
    let dir = tempfile::tempdir().expect("tempdir");
    let e = index(format!("file://{}/missing.git", dir.path().display())).await;
    assert_eq!(e.code(), "repo_unavailable", "{e}");
    assert!(!retryable(&e), "{e}");
    let e = index(dir.path().join("missing").display().to_string()).await;
    assert_eq!(e.code(), "repo_unavailable", "{e}");
    assert!(!retryable(&e), "{e}");

    // Through the tool: a tag whose local folder is gone, and one whose URL carried the
    // credential, which was not stored; both refused as not retryable.
    let registry = ToolRegistry::new();
    register(
        &registry,
        MemoryTools {
            session: Arc::new(SessionMemory::new(store.clone(), embedder.clone())),
            patterns: Arc::clone(&patterns),
            on_indexed: None,
            access: None,
        },
    )
    .expect("register");
    let gone = dir.path().join("gone");
    common::write_tree(&gone, &[("src/lib.rs", "pub fn kept() -> u32 { 7 }\n")]);
    let repo = ExampleRepo {
        url: gone.display().to_string(),
        reference_tag: "gone".into(),
        arch_tag: "mvc".into(),
    };
    patterns.index(&repo, &NoProgress).await.expect("indexed");
    std::fs::remove_dir_all(&gone).expect("remove");
    refused(
        &registry,
        "refresh_pattern_example",
        json!({"reference_tag": "gone"}),
        "repo_unavailable",
        false,
    )
    .await;

    let bare = dir.path().join("bare.git");
    let work = dir.path().join("work");
    common::write_tree(&work, &[("src/lib.rs", "pub fn private() -> u32 { 7 }\n")]);
    kberg_testkit::git::git(&work, &["init", "-q"]);
    kberg_testkit::git::git(&work, &["add", "."]);
    kberg_testkit::git::git(&work, &["commit", "-q", "-m", "one"]);
    kberg_testkit::git::git(
        dir.path(),
        &["clone", "-q", "--bare", "work", &bare.display().to_string()],
    );
    let repo = ExampleRepo {
        url: format!("file://bot:token@localhost{}", bare.display()),
        reference_tag: "tokened".into(),
        arch_tag: "mvc".into(),
    };
    patterns.index(&repo, &NoProgress).await.expect("indexed");
    let s = refused(
        &registry,
        "refresh_pattern_example",
        json!({"reference_tag": "tokened"}),
        "repo_unavailable",
        false,
    )
    .await;
    assert!(!s.to_string().contains("token@"), "{s}");
}
