//! The `kanboard:` section is checked when `bridle.yaml` is read (`bridle check`, a start, an
//! edit through the admin API), naming the field: a URL that does not parse or is not HTTP and
//! an agent that is not configured used to pass there and fail only when the gateway was built.
#![cfg(feature = "kanboard")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use bridle_gateway::config::{GatewayConfig, init_data_dir_with_token_files};

/// A fresh data directory (agents `claude` and `codex`) with `section` appended to its
/// `bridle.yaml`.
fn data_dir(section: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(section);
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    tmp
}

/// Why the data directory with `section` does not load.
fn load_error(section: &str) -> String {
    let tmp = data_dir(section);
    GatewayConfig::load(tmp.path()).unwrap_err().to_string()
}

#[test]
fn a_kanboard_section_that_is_right_loads() {
    let tmp = data_dir(
        "kanboard:\n  url: http://127.0.0.1:9/jsonrpc.php\n  agents:\n    claude: {secret: kanboard-claude, user: claude-bot}\n",
    );
    let config = GatewayConfig::load(tmp.path()).unwrap();
    assert!(config.kanboard.is_some());
}

#[test]
fn a_kanboard_url_that_does_not_parse_is_refused_at_load_naming_the_field() {
    let err = load_error("kanboard:\n  url: 'not a url'\n");
    assert!(err.contains("kanboard.url"), "{err}");
}

#[test]
fn a_kanboard_url_that_is_not_http_is_refused_at_load_naming_the_field() {
    let err = load_error("kanboard:\n  url: 'ftp://kanboard.example/jsonrpc.php'\n");
    assert!(err.contains("kanboard.url"), "{err}");
    assert!(err.contains("http"), "{err}");
}

#[test]
fn a_kanboard_url_error_does_not_quote_its_credentials() {
    let err = load_error("kanboard:\n  url: 'ftp://bot:s3cret@kanboard.example/jsonrpc.php'\n");
    assert!(err.contains("kanboard.url"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn a_kanboard_agent_that_is_not_configured_is_refused_at_load_naming_the_field() {
    let err = load_error(
        "kanboard:\n  url: http://127.0.0.1:9/jsonrpc.php\n  agents:\n    ghost: {secret: kanboard-ghost}\n",
    );
    assert!(err.contains("kanboard.agents"), "{err}");
    assert!(err.contains("ghost"), "{err}");
}
