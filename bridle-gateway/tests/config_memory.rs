//! The `memory:` section's URLs are checked when `bridle.yaml` is read (`bridle check`, a start,
//! an edit through the admin API), naming the field: an embedding server or Qdrant URL that did
//! not parse, or was not HTTP, used to pass there and fail only when the gateway opened memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use bridle_gateway::config::{GatewayConfig, init_data_dir_with_token_files};

/// Why a fresh data directory with `section` appended to its `bridle.yaml` does not load.
fn load_error(section: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(section);
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    GatewayConfig::load(tmp.path()).unwrap_err().to_string()
}

#[test]
fn an_ollama_url_that_does_not_parse_is_refused_at_load_naming_the_field() {
    let err = load_error("memory:\n  embedder:\n    ollama: {url: 'not a url', model: m}\n");
    assert!(err.contains("memory.embedder.ollama.url"), "{err}");
}

#[test]
fn an_openai_url_that_is_not_http_is_refused_at_load_without_quoting_it() {
    let err = load_error(
        "memory:\n  embedder:\n    openai: {url: 'ftp://bot:s3cret@embed.example/v1', model: m}\n",
    );
    assert!(err.contains("memory.embedder.openai.url"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn a_qdrant_url_that_does_not_parse_is_refused_at_load_naming_the_field() {
    let err = load_error(
        "memory:\n  embedder:\n    ollama: {url: 'http://127.0.0.1:9', model: m}\n  store:\n    qdrant: {url: '127.0.0.1 6334'}\n",
    );
    assert!(err.contains("memory.store.qdrant.url"), "{err}");
}

#[test]
fn right_memory_urls_load() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(
        "memory:\n  embedder:\n    openai: {url: 'http://127.0.0.1:1234/v1', model: m}\n",
    );
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    assert!(GatewayConfig::load(tmp.path()).unwrap().memory.is_some());
}
