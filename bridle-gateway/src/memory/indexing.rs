//! The `memory.indexing:` subsection of `bridle.yaml`: the limits of what indexing one pattern
//! example may read and hold, and how long its clone may take and how much disk it may fill.
//!
//! bridle-memory bounds every indexing run ([`PatternIndexConfig`], [`FileRules`]) so that a
//! repository that checks out gigabytes cannot exhaust the gateway's memory or disk. The right
//! bounds depend on the host: a big monorepo needs them raised, a small box lowered. This section
//! lets an operator set them; each key left out keeps bridle-memory's own default, read from
//! [`PatternIndexConfig::default`] rather than written again here. Sizes are in bytes and
//! durations in seconds, the unit in the key's name, as the rest of `bridle.yaml` writes them
//! (`vendor_feed.max_bytes`, `call_timeout_secs`).
//!
//! Every value is checked when the configuration is loaded ([`IndexingSection::check`]): a zero,
//! a total smaller than the largest file, or a value past what the indexer can count is refused
//! with the key named, so a typo stops the start rather than every later index.
//!
//! `git_credentials` lets a private example repository be cloned without a token in its URL
//! (and so in the rules document, which agents and admins read): each entry names a site, a
//! user name and a secret (in the vault or the secrets folder, as an upstream's credential
//! does). A clone of a URL under the site, and with no user part of its own, sends that secret
//! as HTTP Basic authentication to that site alone; each use is recorded as an upstream call's
//! is, and a rotated secret is used from the next clone on.

use std::sync::Arc;
use std::time::Duration;

use bridle_memory::PatternIndexConfig;
use bridle_memory::repo::{GitAuth, GitCredentials, redact_url};
use serde::{Deserialize, Serialize};

use crate::upstreams::{SecretError, SecretSource, SecretUse};

#[cfg(doc)]
use bridle_memory::repo::FileRules;

/// The largest `max_total_bytes` (and so `max_file_bytes`) accepted: 1 TiB. Far beyond any
/// repository worth indexing, and far enough below `u64::MAX` that the indexer's byte counts
/// cannot overflow.
pub const MAX_TOTAL_BYTES_ACCEPTED: u64 = 1 << 40;

/// The longest `clone_timeout_secs` accepted: a day. A clone still running after that is stuck.
pub const MAX_CLONE_TIMEOUT_SECS: u64 = 86_400;

/// `memory.indexing:` in `bridle.yaml`: the limits of one indexing run.
///
/// ```yaml
/// memory:
///   embedder: {ollama: {url: "http://127.0.0.1:11434", model: nomic-embed-text}}
///   indexing:
///     max_total_bytes: 268435456   # 256 MiB, for a monorepo
///     max_chunks: 200000
///     git_credentials:
///       - {site: "https://git.example/team/", username: bridle-bot, secret: gitea-read}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IndexingSection {
    /// Files larger than this many bytes are skipped ([`FileRules::max_file_bytes`]).
    pub max_file_bytes: u64,
    /// At most this many indexable files are read; a repository with more fails with
    /// `index_too_large` and the previous index stays ([`FileRules::max_files`]).
    pub max_files: usize,
    /// At most this many bytes are read in all; past it the run fails with `index_too_large`
    /// and the previous index stays ([`FileRules::max_total_bytes`]).
    pub max_total_bytes: u64,
    /// At most this many chunks per repository; past it the run fails with `index_too_large`
    /// and the previous index stays ([`PatternIndexConfig::max_chunks`]).
    pub max_chunks: usize,
    /// How long a `git clone` may take, in seconds; past it the run fails with
    /// `repo_unavailable` ([`PatternIndexConfig::clone_timeout`]).
    pub clone_timeout_secs: u64,
    /// At most this many bytes on disk for a clone (its `.git` folder and checked-out files;
    /// a local directory is not cloned); past it git is stopped, the partial clone removed and
    /// the run fails with `index_too_large`, the previous index kept
    /// ([`PatternIndexConfig::max_clone_bytes`]).
    pub max_clone_bytes: u64,
    /// Whether hidden files and folders (names starting with `.`) are read too
    /// ([`FileRules::hidden`]).
    pub hidden: bool,
    /// Credentials for cloning private example repositories, one per site (see the module
    /// documentation). The most specific site that covers a URL is used.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub git_credentials: Vec<GitCredentialSection>,
}

/// One entry of `memory.indexing.git_credentials`: the secret a clone of a repository under
/// `site` authenticates with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitCredentialSection {
    /// `https://host/` or a path under it (`https://git.example/team/`); `http` only for a
    /// loopback host. No user part, query or fragment.
    pub site: String,
    /// The user name of HTTP Basic authentication (for Gitea, the token's owner).
    pub username: String,
    /// The name of the secret holding the password or access token (the vault, or a file of
    /// the secrets folder), never the value itself.
    pub secret: String,
}

/// The most entries `git_credentials` may have.
pub const MAX_GIT_CREDENTIALS: usize = 64;

impl Default for IndexingSection {
    /// bridle-memory's defaults.
    fn default() -> Self {
        let d = PatternIndexConfig::default();
        Self {
            max_file_bytes: d.files.max_file_bytes,
            max_files: d.files.max_files,
            max_total_bytes: d.files.max_total_bytes,
            max_chunks: d.max_chunks,
            clone_timeout_secs: d.clone_timeout.as_secs(),
            max_clone_bytes: d.max_clone_bytes,
            hidden: d.files.hidden,
            git_credentials: Vec::new(),
        }
    }
}

impl IndexingSection {
    /// Whether every key has its default (the section is then not written out).
    pub fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// Checks the values as the configuration loader does; the message names the key.
    pub fn check(&self) -> Result<(), String> {
        let at_least_one = [
            ("max_file_bytes", self.max_file_bytes == 0),
            ("max_files", self.max_files == 0),
            ("max_total_bytes", self.max_total_bytes == 0),
            ("max_chunks", self.max_chunks == 0),
            ("clone_timeout_secs", self.clone_timeout_secs == 0),
            ("max_clone_bytes", self.max_clone_bytes == 0),
        ];
        if let Some((key, _)) = at_least_one.iter().find(|(_, zero)| *zero) {
            return Err(format!(
                "memory.indexing.{key} must be at least 1 (0 would leave nothing to index)"
            ));
        }
        if self.max_total_bytes > MAX_TOTAL_BYTES_ACCEPTED {
            return Err(format!(
                "memory.indexing.max_total_bytes {} is more than the largest accepted, {MAX_TOTAL_BYTES_ACCEPTED} (1 TiB)",
                self.max_total_bytes
            ));
        }
        if self.max_total_bytes < self.max_file_bytes {
            return Err(format!(
                "memory.indexing.max_total_bytes ({}) is smaller than memory.indexing.max_file_bytes ({}): the total must hold at least one file of the largest size read",
                self.max_total_bytes, self.max_file_bytes
            ));
        }
        if self.clone_timeout_secs > MAX_CLONE_TIMEOUT_SECS {
            return Err(format!(
                "memory.indexing.clone_timeout_secs {} is more than the longest accepted, {MAX_CLONE_TIMEOUT_SECS} (a day)",
                self.clone_timeout_secs
            ));
        }
        if self.git_credentials.len() > MAX_GIT_CREDENTIALS {
            return Err(format!(
                "memory.indexing.git_credentials has {} entries; at most {MAX_GIT_CREDENTIALS} are accepted",
                self.git_credentials.len()
            ));
        }
        let mut sites = std::collections::BTreeSet::new();
        for (i, c) in self.git_credentials.iter().enumerate() {
            let at = format!("memory.indexing.git_credentials[{i}]");
            // The site and user name are checked as the clone will use them, with a stand-in
            // for the secret, which is not read here.
            let auth = GitAuth::basic(&c.site, &c.username, "-").map_err(|e| {
                format!(
                    "{at}: {}",
                    e.to_string().trim_start_matches("invalid input: ")
                )
            })?;
            if !sites.insert(auth.site().to_string()) {
                return Err(format!(
                    "{at}: the site {} is listed twice",
                    redact_url(auth.site())
                ));
            }
            if !valid_secret_name(&c.secret) {
                return Err(format!(
                    "{at}.secret must name a secret (1 to 128 letters, digits, `.`, `_` and `-`, starting with a letter or digit), not hold one"
                ));
            }
        }
        Ok(())
    }

    /// The clone credentials of `git_credentials`, read from `secrets` at each clone, or `None`
    /// when there are none. Call [`IndexingSection::check`] first: an entry it would refuse is
    /// left out.
    pub fn git_credentials(
        &self,
        secrets: Arc<dyn SecretSource>,
    ) -> Option<Arc<dyn GitCredentials>> {
        let mut sites: Vec<(GitAuth, GitCredentialSection)> = self
            .git_credentials
            .iter()
            .filter_map(|c| Some((GitAuth::basic(&c.site, &c.username, "-").ok()?, c.clone())))
            .collect();
        if sites.is_empty() {
            return None;
        }
        // The most specific site first.
        sites.sort_by_key(|(a, _)| std::cmp::Reverse(a.site().len()));
        Some(Arc::new(SiteCredentials { sites, secrets }))
    }

    /// bridle-memory's pattern-index settings with these limits, everything else its default.
    pub fn pattern_config(&self) -> PatternIndexConfig {
        let mut config = PatternIndexConfig::default();
        config.files.max_file_bytes = self.max_file_bytes;
        config.files.max_files = self.max_files;
        config.files.max_total_bytes = self.max_total_bytes;
        config.files.hidden = self.hidden;
        config.max_chunks = self.max_chunks;
        config.clone_timeout = Duration::from_secs(self.clone_timeout_secs);
        config.max_clone_bytes = self.max_clone_bytes;
        // An `index_too_large` names the bridle.yaml key to raise, not bridle-memory's field.
        config.limit_names = bridle_memory::LimitNames {
            max_total_bytes: "`memory.indexing.max_total_bytes` in bridle.yaml".into(),
            max_files: "`memory.indexing.max_files` in bridle.yaml".into(),
            max_chunks: "`memory.indexing.max_chunks` in bridle.yaml".into(),
            max_clone_bytes: "`memory.indexing.max_clone_bytes` in bridle.yaml".into(),
        };
        config
    }
}

/// A secret's name as both the vault and the secrets folder accept it.
fn valid_secret_name(name: &str) -> bool {
    name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The clone credentials of `memory.indexing.git_credentials`: each site's matcher (built with
/// a stand-in secret, never sent) and its entry.
struct SiteCredentials {
    sites: Vec<(GitAuth, GitCredentialSection)>,
    secrets: Arc<dyn SecretSource>,
}

impl std::fmt::Debug for SiteCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.sites.iter().map(|(a, c)| (a.site(), &c.secret)))
            .finish()
    }
}

/// Who a clone's use of a secret is recorded for.
const INDEXER: &str = "bridle-indexer";

impl GitCredentials for SiteCredentials {
    fn for_clone(&self, url: &str, reference_tag: &str) -> bridle_memory::Result<Option<GitAuth>> {
        let Some((site, entry)) = self.sites.iter().find(|(a, _)| a.covers(url)) else {
            return Ok(None);
        };
        // `lasting`: a secret missing, revoked, empty or unusable stays so until a person acts;
        // a vault that could not be read, or a use that could not be recorded, may work next
        // time.
        let unavailable =
            |reason: String, lasting: bool| bridle_memory::MemoryError::RepoUnavailable {
                source_repo: redact_url(url),
                reason,
                lasting,
            };
        let (value, version) = self.secrets.current(&entry.secret).map_err(|e| {
            unavailable(format!(
                "its credential `{}` (memory.indexing.git_credentials, site {}) is not available: {e}",
                entry.secret,
                site.site()
            ), matches!(e, SecretError::Missing { .. } | SecretError::Empty { .. }))
        })?;
        let upstream = format!("git {}", site.site());
        self.secrets
            .record_use(&SecretUse {
                name: &entry.secret,
                version,
                upstream: &upstream,
                agent: INDEXER,
                request: reference_tag,
            })
            .map_err(|e| {
                unavailable(format!(
                    "the use of its credential `{}` could not be recorded, so nothing was cloned: {e}",
                    entry.secret
                ), false)
            })?;
        GitAuth::basic(site.site(), &entry.username, value.expose())
            .map(Some)
            .map_err(|_| {
                unavailable(format!(
                    "the secret `{}` cannot be sent as a git credential (it is empty or holds a line break)",
                    entry.secret
                ), true)
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

    use proptest::prelude::*;

    use super::*;
    use crate::config::{ConfigError, GatewayConfig, init_data_dir_with_token_files};
    use crate::memory::MemorySection;

    const EMBEDDER: &str =
        "memory:\n  embedder:\n    ollama: {url: \"http://127.0.0.1:11434\", model: m}\n";

    /// Loads a fresh data directory's `bridle.yaml` with `memory` appended; also says how many
    /// lines the file has.
    fn load_with_lines(memory: &str) -> (Result<GatewayConfig, ConfigError>, usize) {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        let file = tmp.path().join("bridle.yaml");
        let yaml = format!("{}{memory}", std::fs::read_to_string(&file).unwrap());
        std::fs::write(&file, &yaml).unwrap();
        (GatewayConfig::load(tmp.path()), yaml.lines().count())
    }

    fn load_with(memory: &str) -> Result<GatewayConfig, ConfigError> {
        load_with_lines(memory).0
    }

    fn refusal(memory: &str) -> String {
        match load_with(memory) {
            Err(ConfigError::Invalid { message, .. }) => message,
            other => panic!("expected a refusal of {memory:?}, got {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_bridle_memorys() {
        let ours = IndexingSection::default().pattern_config();
        let theirs = PatternIndexConfig::default();
        assert_eq!(ours.files.max_file_bytes, theirs.files.max_file_bytes);
        assert_eq!(ours.files.max_files, theirs.files.max_files);
        assert_eq!(ours.files.max_total_bytes, theirs.files.max_total_bytes);
        assert_eq!(ours.files.hidden, theirs.files.hidden);
        assert_eq!(ours.max_chunks, theirs.max_chunks);
        assert_eq!(ours.max_clone_bytes, theirs.max_clone_bytes);
        assert_eq!(ours.clone_timeout, theirs.clone_timeout);
        // The settings this section does not name are left as they are.
        assert_eq!(ours.collection, theirs.collection);
        assert_eq!(ours.batch_size, theirs.batch_size);
        assert_eq!(ours.summaries, theirs.summaries);
        IndexingSection::default().check().unwrap();
    }

    #[test]
    fn git_credentials_parse_and_every_bad_entry_is_refused_by_its_place() {
        let with = load_with(&format!(
            "{EMBEDDER}  indexing:\n    git_credentials:\n      - {{site: 'https://git.example/team', username: bot, secret: gitea-read}}\n"
        ))
        .unwrap()
        .memory
        .unwrap();
        assert_eq!(
            with.indexing.git_credentials,
            [GitCredentialSection {
                site: "https://git.example/team".into(),
                username: "bot".into(),
                secret: "gitea-read".into(),
            }]
        );
        let entry = |site: &str, user: &str, secret: &str| {
            format!(
                "{EMBEDDER}  indexing:\n    git_credentials:\n      - {{site: '{site}', username: '{user}', secret: '{secret}'}}\n"
            )
        };
        for (yaml, says) in [
            (
                entry("http://git.example/", "bot", "s"),
                "must be an https URL",
            ),
            (
                entry("https://me:pw@git.example/", "bot", "s"),
                "user name or password",
            ),
            (
                entry("https://git.example/?t=1", "bot", "s"),
                "query or fragment",
            ),
            (entry("git.example", "bot", "s"), "is not a URL"),
            (entry("https://git.example/", "a:b", "s"), "user name"),
            (
                entry("https://git.example/", "bot", "ghp_a b"),
                "must name a secret",
            ),
            (
                entry("https://git.example/", "bot", "../x"),
                "must name a secret",
            ),
            (
                entry("https://git.example/", "bot", ""),
                "must name a secret",
            ),
        ] {
            let message = refusal(&yaml);
            assert!(
                message.contains("memory.indexing.git_credentials[0]") && message.contains(says),
                "{yaml}: {message}"
            );
            assert!(!message.contains("pw@"), "{message}");
        }
        let twice = format!(
            "{EMBEDDER}  indexing:\n    git_credentials:\n      - {{site: 'https://git.example', username: a, secret: s1}}\n      - {{site: 'https://git.example/', username: b, secret: s2}}\n"
        );
        assert!(
            refusal(&twice)
                .contains("git_credentials[1]: the site https://git.example/ is listed twice")
        );
        let many: String = (0..=MAX_GIT_CREDENTIALS)
            .map(|i| {
                format!("      - {{site: 'https://git{i}.example/', username: a, secret: s}}\n")
            })
            .collect();
        let message = refusal(&format!(
            "{EMBEDDER}  indexing:\n    git_credentials:\n{many}"
        ));
        assert!(message.contains("at most 64"), "{message}");
    }

    #[test]
    fn a_clone_gets_the_most_specific_sites_secret_and_each_use_is_counted() {
        use crate::upstreams::FolderSecrets;
        use std::sync::atomic::{AtomicUsize, Ordering};

        /// A folder of secrets that counts the uses it records.
        struct Counting(FolderSecrets, AtomicUsize);
        impl SecretSource for Counting {
            fn version(&self, name: &str) -> Result<u64, SecretError> {
                self.0.version(name)
            }
            fn current(
                &self,
                name: &str,
            ) -> Result<(crate::upstreams::Credential, u64), SecretError> {
                self.0.current(name)
            }
            fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
                assert_eq!(used.agent, INDEXER);
                self.1.fetch_add(1, Ordering::SeqCst);
                self.0.record_use(used)
            }
        }

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("whole-host"), "canary-host-secret-1\n").unwrap();
        std::fs::write(dir.path().join("team-only"), "canary-team-secret-2\n").unwrap();
        let secrets = Arc::new(Counting(
            FolderSecrets::new(dir.path()),
            AtomicUsize::new(0),
        ));
        let section = IndexingSection {
            git_credentials: vec![
                GitCredentialSection {
                    site: "https://git.example/".into(),
                    username: "bot".into(),
                    secret: "whole-host".into(),
                },
                GitCredentialSection {
                    site: "https://git.example/team/".into(),
                    username: "bot".into(),
                    secret: "team-only".into(),
                },
                GitCredentialSection {
                    site: "https://other.example/".into(),
                    username: "bot".into(),
                    secret: "missing".into(),
                },
            ],
            ..IndexingSection::default()
        };
        section.check().unwrap();
        assert!(
            IndexingSection::default()
                .git_credentials(secrets.clone())
                .is_none()
        );
        let creds = section.git_credentials(secrets.clone()).unwrap();
        let shown = format!("{creds:?}");
        assert!(!shown.contains("canary"), "{shown}");

        let team = creds
            .for_clone("https://git.example/team/app.git", "t1")
            .unwrap()
            .unwrap();
        assert_eq!(team.site(), "https://git.example/team/");
        let host = creds
            .for_clone("https://git.example/solo/app.git", "t2")
            .unwrap()
            .unwrap();
        assert_eq!(host.site(), "https://git.example/");
        assert!(
            creds
                .for_clone("https://elsewhere.example/x.git", "t3")
                .unwrap()
                .is_none()
        );
        assert_eq!(secrets.1.load(Ordering::SeqCst), 2);

        // A secret that cannot be read fails the clone, naming it, not quoting any value.
        let e = creds
            .for_clone("https://other.example/x.git", "t4")
            .unwrap_err();
        assert_eq!(e.code(), "repo_unavailable");
        assert!(
            !bridle_memory::tools::retryable(&e),
            "a missing secret stays missing until a person adds it"
        );
        let message = e.to_string();
        assert!(message.contains("`missing`"), "{message}");
        assert!(!message.contains("canary"), "{message}");
        assert_eq!(
            secrets.1.load(Ordering::SeqCst),
            2,
            "nothing used, nothing recorded"
        );

        // A value with a line break cannot go into a header: refused, not quoted.
        std::fs::write(dir.path().join("team-only"), "canary-line\nX-Evil: 1\n").unwrap();
        let e = creds
            .for_clone("https://git.example/team/app.git", "t5")
            .unwrap_err();
        assert!(e.to_string().contains("line break"), "{e}");
        assert!(!e.to_string().contains("canary"), "{e}");
    }

    /// The README's `memory:` example writes out the defaults; it says what they are.
    #[test]
    fn the_readme_example_shows_the_defaults() {
        let readme = include_str!("../../README.md");
        let start = readme
            .find("```yaml\nmemory:\n")
            .expect("the memory example")
            + 8;
        let block = &readme[start..];
        let block = &block[..block.find("```").expect("the block's end")];
        let doc: std::collections::BTreeMap<String, MemorySection> =
            serde_saphyr::from_str(block).unwrap();
        let indexing = &doc["memory"].indexing;
        assert!(block.contains("max_chunks:"), "{block}");
        assert_eq!(indexing, &IndexingSection::default());
    }

    #[test]
    fn the_section_parses_with_and_without_indexing() {
        let without = load_with(EMBEDDER).unwrap().memory.unwrap();
        assert_eq!(without.indexing, IndexingSection::default());

        let with = load_with(&format!(
            "{EMBEDDER}  indexing:\n    max_total_bytes: 1048576\n    max_chunks: 10\n    clone_timeout_secs: 30\n    max_clone_bytes: 65536\n    hidden: true\n"
        ))
        .unwrap()
        .memory
        .unwrap();
        let expected = IndexingSection {
            max_total_bytes: 1_048_576,
            max_chunks: 10,
            clone_timeout_secs: 30,
            max_clone_bytes: 65_536,
            hidden: true,
            ..IndexingSection::default()
        };
        assert_eq!(with.indexing, expected);

        // And it reaches the memory service's configuration.
        let dir = tempfile::tempdir().unwrap();
        let patterns = with.to_config(dir.path(), dir.path()).unwrap().patterns;
        assert_eq!(patterns.files.max_total_bytes, 1_048_576);
        assert_eq!(
            patterns.files.max_file_bytes,
            PatternIndexConfig::default().files.max_file_bytes
        );
        assert_eq!(patterns.max_chunks, 10);
        assert_eq!(patterns.clone_timeout, Duration::from_secs(30));
        assert_eq!(patterns.max_clone_bytes, 65_536);
        assert!(patterns.files.hidden);
    }

    #[test]
    fn a_default_section_is_not_written_out_and_a_set_one_round_trips() {
        let section: MemorySection =
            serde_saphyr::from_str("embedder: {ollama: {url: 'http://u', model: m}}").unwrap();
        let yaml = serde_saphyr::to_string(&section).unwrap();
        assert!(!yaml.contains("indexing"), "{yaml}");

        let mut changed = section.clone();
        changed.indexing.max_files = 7;
        let yaml = serde_saphyr::to_string(&changed).unwrap();
        assert!(yaml.contains("max_files: 7"), "{yaml}");
        let back: MemorySection = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, changed);
    }

    #[test]
    fn each_bad_value_is_refused_naming_its_key() {
        for (indexing, key) in [
            ("max_file_bytes: 0", "memory.indexing.max_file_bytes"),
            ("max_files: 0", "memory.indexing.max_files"),
            ("max_total_bytes: 0", "memory.indexing.max_total_bytes"),
            ("max_chunks: 0", "memory.indexing.max_chunks"),
            (
                "clone_timeout_secs: 0",
                "memory.indexing.clone_timeout_secs",
            ),
            ("max_clone_bytes: 0", "memory.indexing.max_clone_bytes"),
            (
                "max_total_bytes: 1099511627777",
                "memory.indexing.max_total_bytes",
            ),
            (
                "max_total_bytes: 18446744073709551615",
                "memory.indexing.max_total_bytes",
            ),
            (
                "max_file_bytes: 4096, max_total_bytes: 1024",
                "memory.indexing.max_total_bytes",
            ),
            (
                "max_file_bytes: 1099511627776",
                "memory.indexing.max_total_bytes",
            ),
            (
                "clone_timeout_secs: 86401",
                "memory.indexing.clone_timeout_secs",
            ),
        ] {
            let message = refusal(&format!("{EMBEDDER}  indexing: {{{indexing}}}\n"));
            assert!(message.contains(key), "{indexing}: {message}");
        }
    }

    /// An unknown key is named; a value of the wrong type (as for every key of `bridle.yaml`)
    /// is refused with the line and column of the value.
    #[test]
    fn unknown_keys_and_values_of_the_wrong_type_are_refused() {
        let message = refusal(&format!("{EMBEDDER}  indexing:\n    max_total_mib: 64\n"));
        assert!(message.contains("max_total_mib"), "{message}");
        for bad in [
            "max_files: -1",
            "max_chunks: 99999999999999999999999",
            "clone_timeout_secs: 5m",
            "max_total_bytes: 64MiB",
            "hidden: maybe",
        ] {
            let (loaded, lines) = load_with_lines(&format!("{EMBEDDER}  indexing:\n    {bad}\n"));
            let Err(ConfigError::Invalid { message, .. }) = loaded else {
                panic!("{bad}: expected a refusal, got {loaded:?}");
            };
            assert!(
                message.starts_with(&format!("line {lines}, ")),
                "{bad}: {message}"
            );
        }
    }

    #[test]
    fn to_config_refuses_what_load_refuses() {
        let mut section: MemorySection =
            serde_saphyr::from_str("embedder: {ollama: {url: 'http://u', model: m}}").unwrap();
        section.indexing.max_chunks = 0;
        let dir = tempfile::tempdir().unwrap();
        let err = section.to_config(dir.path(), dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("memory.indexing.max_chunks"),
            "{err}"
        );
    }

    proptest! {
        /// Any numbers at all: the check and the conversion never panic, and what the check
        /// accepts is what bridle-memory is given.
        #[test]
        fn any_values_are_checked_without_panicking(
            max_file_bytes in any::<u64>(),
            max_files in any::<usize>(),
            max_total_bytes in any::<u64>(),
            max_chunks in any::<usize>(),
            clone_timeout_secs in any::<u64>(),
            max_clone_bytes in any::<u64>(),
            hidden in any::<bool>(),
        ) {
            let section = IndexingSection {
                max_file_bytes, max_files, max_total_bytes, max_chunks, clone_timeout_secs,
                max_clone_bytes, hidden,
                git_credentials: Vec::new(),
            };
            if section.check().is_ok() {
                let c = section.pattern_config();
                prop_assert!(c.files.max_file_bytes <= c.files.max_total_bytes);
                prop_assert!(c.files.max_total_bytes <= MAX_TOTAL_BYTES_ACCEPTED);
                prop_assert_eq!(c.max_chunks, max_chunks);
                prop_assert_eq!(c.clone_timeout.as_secs(), clone_timeout_secs);
                prop_assert_eq!(c.max_clone_bytes, max_clone_bytes);
            }
        }
    }
}
