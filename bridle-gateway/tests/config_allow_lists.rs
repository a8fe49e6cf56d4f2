//! `allowed_hosts` and `allowed_origins` are checked when `bridle.yaml` is read, naming the
//! field and the entry. A malformed entry (a URL where a host belongs, a host where an origin
//! belongs) used to be accepted there and then dropped with only a log line when the endpoint
//! started, so a gateway whose only entry was mistyped refused every agent's request.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use bridle_gateway::config::{GatewayConfig, init_data_dir_with_token_files};

fn data_dir(section: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(section);
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    tmp
}

fn load_error(section: &str) -> String {
    GatewayConfig::load(data_dir(section).path())
        .unwrap_err()
        .to_string()
}

#[test]
fn a_url_among_the_allowed_hosts_is_refused_at_load() {
    let err = load_error("allowed_hosts: ['https://bridle.example.org']\n");
    assert!(err.contains("allowed_hosts"), "{err}");
    assert!(err.contains("https://bridle.example.org"), "{err}");
}

#[test]
fn a_host_among_the_allowed_origins_is_refused_at_load() {
    let err = load_error("allowed_origins: ['bridle.example.org']\n");
    assert!(err.contains("allowed_origins"), "{err}");
    assert!(err.contains("bridle.example.org"), "{err}");
}

#[test]
fn an_origin_with_a_path_is_refused_at_load() {
    let err = load_error("allowed_origins: ['https://bridle.example.org/mcp']\n");
    assert!(err.contains("allowed_origins"), "{err}");
}

#[test]
fn every_form_the_endpoint_accepts_loads() {
    let tmp = data_dir(
        "allowed_hosts: ['bridle.example.org', 'bridle.example.org:7878', '[::1]:7878', '::1', 'localhost']\nallowed_origins: ['https://bridle.example.org', 'http://localhost:*', 'http://[::1]:7878/', 'null', 'vscode-webview://abc']\n",
    );
    let config = GatewayConfig::load(tmp.path()).unwrap();
    assert_eq!(config.allowed_hosts.len(), 5);
    assert_eq!(config.allowed_origins.len(), 5);
}
