//! Sections of `bridle.yaml` checked when it is read (`bridle check`, a start, an edit through
//! the admin API), each refusal naming the field and never quoting a URL's credentials. Each of
//! these used to pass there and fail only later:
//!
//! - `allowed_hosts` and `allowed_origins`: a malformed entry (a URL where a host belongs, a host
//!   where an origin belongs) was dropped with only a log line when the endpoint started, so a
//!   gateway whose only entry was mistyped refused every agent's request;
//! - the `memory:` section's URLs (an embedding server, Qdrant) that did not parse or were not
//!   HTTP failed only when the gateway opened memory;
//! - the `kanboard:` section's URL, and an agent there that is not configured, failed only when
//!   the gateway was built.

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
    GatewayConfig::load(data_dir(section).path())
        .unwrap_err()
        .to_string()
}

mod allow_lists {
    use super::*;

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
}

mod memory {
    use super::*;

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
        let tmp = data_dir(
            "memory:\n  embedder:\n    openai: {url: 'http://127.0.0.1:1234/v1', model: m}\n",
        );
        assert!(GatewayConfig::load(tmp.path()).unwrap().memory.is_some());
    }
}

#[cfg(feature = "kanboard")]
mod kanboard {
    use super::*;

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
}

/// `database_statement_deadline_secs`: how long a PostgreSQL statement may wait for the
/// server's reply (bridle-rules' two minutes when absent). There was no such key, so an
/// operator with slow disks or long migrations could neither raise it nor lower it.
mod statement_deadline {
    use std::time::Duration;

    use super::*;

    #[test]
    fn absent_it_leaves_the_default() {
        let config = GatewayConfig::load(data_dir("").path()).unwrap();
        assert_eq!(config.database_statement_deadline(), None);
    }

    #[test]
    fn a_deadline_in_seconds_loads() {
        for (yaml, secs) in [
            ("database_statement_deadline_secs: 600\n", 600),
            ("database_statement_deadline_secs: 5\n", 5),
        ] {
            let config = GatewayConfig::load(data_dir(yaml).path()).unwrap();
            assert_eq!(
                config.database_statement_deadline(),
                Some(Duration::from_secs(secs))
            );
        }
    }

    #[test]
    fn zero_is_refused_at_load_naming_the_key() {
        let err = load_error("database_statement_deadline_secs: 0\n");
        assert!(err.contains("database_statement_deadline_secs"), "{err}");
        assert!(err.contains("at least 1"), "{err}");
    }

    #[test]
    fn more_than_a_day_is_refused_at_load_naming_the_key() {
        let err = load_error("database_statement_deadline_secs: 86401\n");
        assert!(err.contains("database_statement_deadline_secs"), "{err}");
        assert!(err.contains("86400"), "{err}");
        // A negative number does not parse: refused with its line and column.
        let err = load_error("database_statement_deadline_secs: -5\n");
        assert!(err.contains("invalid u64"), "{err}");
    }
}

/// The `audit:` section's retention limits. A limit of 0 was taken as given: `max_age_days: 0`
/// removed every entry at each pass, and `max_entries: 0` every entry but the pass's own, so an
/// operator who wrote 0 for "no limit" lost the audit log at the next start.
mod audit_retention {
    use super::*;

    #[test]
    fn a_zero_age_limit_is_refused_at_load_naming_the_key() {
        let err = load_error("audit:\n  max_age_days: 0\n");
        assert!(err.contains("audit.max_age_days"), "{err}");
        assert!(err.contains("leave it out"), "{err}");
    }

    #[test]
    fn a_zero_count_limit_is_refused_at_load_naming_the_key() {
        let err = load_error("audit:\n  max_entries: 0\n");
        assert!(err.contains("audit.max_entries"), "{err}");
        assert!(err.contains("leave it out"), "{err}");
    }

    #[test]
    fn limits_of_one_and_more_load() {
        let tmp = data_dir("audit:\n  max_age_days: 1\n  max_entries: 1\n");
        let config = GatewayConfig::load(tmp.path()).unwrap();
        assert_eq!(config.audit.max_age_days, Some(1));
        assert_eq!(config.audit.max_entries, Some(1));
    }
}

/// Secret files read at start (agent token files, memory's credentials) through
/// `config::read_secret`. One was read whole, however large: a secret name pointing at a huge
/// file or a device that never ends (`/dev/zero` linked in by a mount gone wrong) filled the
/// memory before the start failed.
mod secret_files {
    use bridle_gateway::config::{MAX_SECRET_FILE_BYTES, read_secret};

    #[test]
    fn a_secret_file_over_the_limit_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let size = usize::try_from(MAX_SECRET_FILE_BYTES).unwrap() + 1;
        std::fs::write(dir.path().join("huge"), vec![b'a'; size]).unwrap();
        let err = read_secret(dir.path(), "huge").unwrap_err().to_string();
        assert!(err.contains("huge"), "{err}");
        assert!(err.contains(&MAX_SECRET_FILE_BYTES.to_string()), "{err}");
        assert!(!err.contains("aaaa"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_that_never_ends_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero")).unwrap();
        let err = read_secret(dir.path(), "zero").unwrap_err().to_string();
        assert!(err.contains("zero"), "{err}");
    }

    /// The `secrets/` folder was read two ways: a `file:` reference (or a bare name) refused a
    /// named pipe at once, while an agent's `token_secret` in the same folder waited up to
    /// 30 s for a writer. Both are read by one rule now: a pipe is refused before it is opened.
    #[cfg(unix)]
    #[test]
    fn a_secret_that_is_a_pipe_is_refused_at_once_whoever_reads_it() {
        use bridle_gateway::upstreams::{FolderSecrets, SecretSource};
        let dir = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("piped"))
            .status()
            .unwrap();
        assert!(made.success());
        let folder = dir.path().to_path_buf();
        let (answer, answered) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let agent = read_secret(&folder, "piped").map_err(|e| e.to_string());
            let reference = FolderSecrets::new(&folder)
                .current("piped")
                .map(drop)
                .map_err(|e| e.to_string());
            let _ = answer.send((agent, reference));
        });
        let (agent, reference) = answered
            .recv_timeout(kberg_testkit::WAIT)
            .expect("both answered without waiting for a writer");
        let agent = agent.expect_err("an agent token that is a pipe is refused");
        let reference = reference.expect_err("a reference to a pipe is refused");
        for refused in [&agent, &reference] {
            assert!(refused.contains("not a regular file"), "{refused}");
        }
        assert!(agent.contains("piped"), "{agent}");
    }

    #[test]
    fn a_secret_within_the_limit_is_read_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ok"), "  s3cret-token \n").unwrap();
        assert_eq!(read_secret(dir.path(), "ok").unwrap(), "s3cret-token");
    }
}
