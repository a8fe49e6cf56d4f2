//! Settings from the environment laid over `bridle.yaml` (`bridle_gateway::edge`): each
//! variable sets its key, the environment wins over the file, the result is checked as a file
//! is, a setting with nothing to apply to is an error, never dropped, and a value its key
//! cannot take is refused naming the variable.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::collections::HashMap;
use std::path::PathBuf;

use bridle_gateway::config::{ConfigError, GatewayConfig};
use bridle_gateway::edge::{EDGE_VARIABLES, EdgeSettings};
use bridle_gateway::memory::{MemoryEmbedderConfig, MemoryStoreConfig};

fn edge(pairs: &[(&str, &str)]) -> EdgeSettings {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    EdgeSettings::from_lookup(|k| map.get(k).cloned())
}

fn config(yaml: &str) -> GatewayConfig {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    GatewayConfig::load(tmp.path()).unwrap()
}

const AGENTS: &str = "agents:\n  claude: {type: claude, token_secret: claude-token}\n";

#[test]
fn the_environment_wins_over_the_file() {
    let mut c = config(&format!(
        "listen: 127.0.0.1:7000\nallowed_hosts: ['file:1']\nallowed_origins: ['http://file']\n{AGENTS}vault: {{master_key: /file/key}}\n"
    ));
    let set = c
        .overlay(&edge(&[
            ("BRIDLE_LISTEN", "127.0.0.1:7001"),
            ("BRIDLE_ALLOWED_HOSTS", "bridle.lan:7878, localhost:7878"),
            ("BRIDLE_ALLOWED_ORIGINS", "https://panel.lan"),
            ("BRIDLE_MASTER_KEY_FILE", "/run/secrets/bridle_master_key"),
            ("BRIDLE_ADMIN_TOKEN_FILE", "/run/secrets/bridle_admin_token"),
            ("BRIDLE_DOCKER_SECRETS_DIR", "/run/other-secrets"),
        ]))
        .unwrap();
    assert_eq!(
        set,
        [
            "listen",
            "allowed_hosts",
            "allowed_origins",
            "vault.master_key",
            "admin.token_file",
            "vault.docker_secrets_dir"
        ]
    );
    assert_eq!(
        c.admin.token_file,
        Some(PathBuf::from("/run/secrets/bridle_admin_token"))
    );
    assert_eq!(c.listen, "127.0.0.1:7001");
    assert_eq!(c.allowed_hosts, ["bridle.lan:7878", "localhost:7878"]);
    assert_eq!(c.allowed_origins, ["https://panel.lan"]);
    assert_eq!(
        c.vault.master_key,
        Some(PathBuf::from("/run/secrets/bridle_master_key"))
    );
    assert_eq!(
        c.vault.docker_secrets_dir,
        Some(PathBuf::from("/run/other-secrets"))
    );
}

#[test]
fn admin_variables_set_the_admin_section() {
    let mut c = config(&format!(
        "{AGENTS}admin:\n  watchers: [carol]\n  allowed_origins: ['https://file.example']\n  login_limits: {{per_address: 7, per_credential: 3, window_secs: 60}}\n"
    ));
    let set = c
        .overlay(&edge(&[
            ("BRIDLE_ADMIN_READ_ONLY", "TRUE"),
            ("BRIDLE_ADMIN_WATCHERS", "auditor, ops.bot"),
            ("BRIDLE_ADMIN_BEHIND_TLS", "1"),
            (
                "BRIDLE_ADMIN_ALLOWED_ORIGINS",
                "https://bridle.example.org, http://[::1]:8443/",
            ),
            ("BRIDLE_ADMIN_LOGIN_LIMITS_PER_ADDRESS", "20"),
            ("BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS", "600"),
        ]))
        .unwrap();
    assert_eq!(
        set,
        [
            "admin.read_only",
            "admin.watchers",
            "admin.behind_tls",
            "admin.allowed_origins",
            "admin.login_limits.per_address",
            "admin.login_limits.window_secs",
        ]
    );
    let a = &c.admin;
    assert!(a.read_only);
    assert_eq!(
        a.watchers,
        ["auditor", "ops.bot"],
        "the list replaces the file's"
    );
    assert!(a.behind_tls);
    assert_eq!(
        a.allowed_origins,
        ["https://bridle.example.org", "http://[::1]:8443/"]
    );
    assert_eq!(a.login_limits.per_address, 20);
    assert_eq!(a.login_limits.per_credential, 3, "unset: the file's");
    assert_eq!(a.login_limits.window_secs, 600);
    // And back off: `false` and `0` are the other answers.
    c.overlay(&edge(&[
        ("BRIDLE_ADMIN_READ_ONLY", "false"),
        ("BRIDLE_ADMIN_BEHIND_TLS", "0"),
    ]))
    .unwrap();
    assert!(!c.admin.read_only && !c.admin.behind_tls);
}

#[test]
fn malformed_admin_variables_are_refused_naming_them() {
    for (variable, value, refused) in [
        ("BRIDLE_ADMIN_READ_ONLY", "yes please", "yes please"),
        ("BRIDLE_ADMIN_BEHIND_TLS", "maybe", "maybe"),
        ("BRIDLE_ADMIN_WATCHERS", "auditor, Bob", "Bob"),
        (
            "BRIDLE_ADMIN_ALLOWED_ORIGINS",
            "https://ok.example, bridle.example",
            "bridle.example",
        ),
        (
            "BRIDLE_ADMIN_ALLOWED_ORIGINS",
            "https://ok.example/panel",
            "https://ok.example/panel",
        ),
        ("BRIDLE_ADMIN_LOGIN_LIMITS_PER_ADDRESS", "0", "0"),
        ("BRIDLE_ADMIN_LOGIN_LIMITS_PER_CREDENTIAL", "five", "five"),
        ("BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS", "-1", "-1"),
        ("BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS", "1.5", "1.5"),
    ] {
        let mut c = config(AGENTS);
        let err = c.overlay(&edge(&[(variable, value)])).unwrap_err();
        let message = err.to_string();
        match err {
            ConfigError::Environment {
                variable: named,
                value: v,
                ..
            } => {
                assert_eq!(named, variable, "{message}");
                assert_eq!(v, refused, "{message}");
            }
            other => panic!("{variable}={value}: {other}"),
        }
        assert!(message.starts_with("<environment>: "), "{message}");
        assert!(message.contains(variable), "{message}");
    }
}

fn load_error(yaml: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    GatewayConfig::load(tmp.path()).unwrap_err().to_string()
}

#[cfg(not(feature = "traces"))]
#[test]
fn traces_need_a_build_with_the_feature() {
    let e = load_error(&format!(
        "{AGENTS}traces: {{otlp: {{endpoint: 'http://c:4318/v1/traces'}}}}\n"
    ));
    assert!(e.contains("feature `traces`"), "{e}");
}

#[cfg(feature = "traces")]
#[test]
fn traces_in_the_file_take_the_environments_endpoint_and_name() {
    let mut c = config(AGENTS);
    let set = c
        .overlay(&edge(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector:4318",
        )]))
        .unwrap();
    assert_eq!(set, ["traces"]);
    assert_eq!(
        c.traces.as_ref().map(|t| t.otlp.endpoint.as_str()),
        Some("http://collector:4318/v1/traces")
    );
    let mut c = config(&format!(
        "{AGENTS}traces: {{otlp: {{endpoint: 'http://file:4318/v1/traces', timeout_secs: 3}}}}\n"
    ));
    assert_eq!(c.traces.as_ref().unwrap().service_name, "bridle");
    c.overlay(&edge(&[
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://env:4318/v1/traces",
        ),
        ("OTEL_SERVICE_NAME", "bridle-edge"),
    ]))
    .unwrap();
    let t = c.traces.unwrap();
    assert_eq!(t.otlp.endpoint, "http://env:4318/v1/traces");
    assert_eq!(t.otlp.timeout_secs, 3);
    assert_eq!(t.service_name, "bridle-edge");
    // A bad endpoint is named, from the file or from the environment.
    let bad = load_error(&format!(
        "{AGENTS}traces: {{otlp: {{endpoint: 'collector:4318'}}}}\n"
    ));
    assert!(bad.contains("traces.otlp.endpoint"), "{bad}");
    let mut c = config(AGENTS);
    let e = c
        .overlay(&edge(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("traces.otlp.endpoint"), "{e}");
}

#[test]
fn nothing_set_changes_nothing() {
    let before = config(&format!("listen: 127.0.0.1:7000\n{AGENTS}"));
    let mut after = before.clone();
    assert!(edge(&[("BRIDLE_LISTEN", "")]).is_empty());
    assert!(after.overlay(&edge(&[])).unwrap().is_empty());
    assert_eq!(before, after);
}

#[test]
fn the_result_is_checked_like_a_file() {
    // Listening beyond loopback needs allowed hosts and origins, from either place.
    let mut c = config(AGENTS);
    let e = c
        .overlay(&edge(&[("BRIDLE_LISTEN", "0.0.0.0:7878")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("allowed_hosts"), "{e}");
    let mut c = config(AGENTS);
    c.overlay(&edge(&[
        ("BRIDLE_LISTEN", "0.0.0.0:7878"),
        ("BRIDLE_ALLOWED_HOSTS", "localhost:7878"),
        ("BRIDLE_ALLOWED_ORIGINS", "http://localhost:7878"),
    ]))
    .unwrap();
    assert_eq!(c.listen, "0.0.0.0:7878");
    let mut c = config(AGENTS);
    let e = c
        .overlay(&edge(&[("BRIDLE_LISTEN", "not-an-address")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("listen address `not-an-address`"), "{e}");
}

#[cfg(feature = "kanboard")]
#[test]
fn kanboard_url_sets_or_creates_the_section() {
    let mut c = config(&format!(
        "{AGENTS}kanboard:\n  url: http://file/jsonrpc.php\n  agents:\n    claude: {{secret: 'docker:kanboard_token'}}\n"
    ));
    c.overlay(&edge(&[("KANBOARD_URL", "http://kanboard/jsonrpc.php")]))
        .unwrap();
    let k = c.kanboard.as_ref().unwrap();
    assert_eq!(k.url, "http://kanboard/jsonrpc.php");
    assert!(
        k.agents.contains_key("claude"),
        "the rest of the section stays"
    );
    let mut c = config(AGENTS);
    c.overlay(&edge(&[("KANBOARD_URL", "http://kanboard/jsonrpc.php")]))
        .unwrap();
    assert_eq!(c.kanboard.unwrap().url, "http://kanboard/jsonrpc.php");
}

#[test]
fn embeddings_and_qdrant_configure_memory() {
    // No memory section: both embedding settings create one, and Qdrant then holds it.
    let mut c = config(AGENTS);
    c.overlay(&edge(&[
        ("EMBEDDINGS_URL", "http://embeddings/v1"),
        ("EMBEDDINGS_MODEL", "all-minilm"),
        ("QDRANT_URL", "http://qdrant:6334"),
    ]))
    .unwrap();
    let m = c.memory.unwrap();
    assert_eq!(
        m.embedder,
        MemoryEmbedderConfig::Openai {
            url: "http://embeddings/v1".into(),
            model: "all-minilm".into(),
            api_key_secret: None,
            timeout_secs: None,
            connect_timeout_secs: None,
            max_input_tokens: None,
        }
    );
    assert_eq!(
        m.store,
        MemoryStoreConfig::Qdrant {
            url: "http://qdrant:6334".into(),
            api_key_secret: None
        }
    );

    // A configured server keeps its model and key; only the URL moves.
    let mut c = config(&format!(
        "{AGENTS}memory:\n  embedder: {{openai: {{url: 'http://file/v1', model: m1, api_key_secret: emb-key}}}}\n  store: {{qdrant: {{url: 'http://file:6334', api_key_secret: q-key}}}}\n"
    ));
    c.overlay(&edge(&[
        ("EMBEDDINGS_URL", "http://embeddings/v1"),
        ("QDRANT_URL", "http://qdrant:6334"),
    ]))
    .unwrap();
    let m = c.memory.unwrap();
    assert_eq!(
        m.embedder,
        MemoryEmbedderConfig::Openai {
            url: "http://embeddings/v1".into(),
            model: "m1".into(),
            api_key_secret: Some("emb-key".into()),
            timeout_secs: None,
            connect_timeout_secs: None,
            max_input_tokens: None,
        }
    );
    assert_eq!(
        m.store,
        MemoryStoreConfig::Qdrant {
            url: "http://qdrant:6334".into(),
            api_key_secret: Some("q-key".into())
        }
    );
}

#[test]
fn a_setting_with_nothing_to_apply_to_is_an_error() {
    for (pairs, needle) in [
        (&[("QDRANT_URL", "http://q:6334")][..], "QDRANT_URL is set"),
        (
            &[("EMBEDDINGS_URL", "http://e/v1")][..],
            "EMBEDDINGS_URL and EMBEDDINGS_MODEL are both needed",
        ),
        (
            &[("GITEA_MCP_URL", "http://gitea-mcp/mcp")][..],
            "GITEA_MCP_URL is set",
        ),
    ] {
        let mut c = config(AGENTS);
        let e = c.overlay(&edge(pairs)).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
        assert!(e.starts_with("<environment>"), "{e}");
    }
}

#[test]
fn gitea_mcp_url_moves_the_gitea_upstream() {
    let mut c = config(&format!(
        "{AGENTS}upstreams:\n  gitea:\n    http: {{url: 'http://file/mcp'}}\n"
    ));
    c.overlay(&edge(&[("GITEA_MCP_URL", "http://gitea-mcp:8080/mcp")]))
        .unwrap();
    assert_eq!(
        c.upstreams["gitea"].http.as_ref().unwrap().url,
        "http://gitea-mcp:8080/mcp"
    );
}

#[test]
fn every_listed_variable_is_read() {
    for (name, _) in EDGE_VARIABLES {
        let e = edge(&[(name, "x")]);
        assert!(!e.is_empty(), "{name} is listed but not read");
    }
}
