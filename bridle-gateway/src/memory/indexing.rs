//! The `memory.indexing:` subsection of `bridle.yaml`: the limits of what indexing one pattern
//! example may read and hold, and how long its clone may take.
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

use std::time::Duration;

use bridle_memory::PatternIndexConfig;
use serde::{Deserialize, Serialize};

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
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IndexingSection {
    /// Files larger than this many bytes are skipped ([`FileRules::max_file_bytes`]).
    pub max_file_bytes: u64,
    /// At most this many files are read; the walk stops there and indexes what it found
    /// ([`FileRules::max_files`]).
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
    /// Whether hidden files and folders (names starting with `.`) are read too
    /// ([`FileRules::hidden`]).
    pub hidden: bool,
}

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
            hidden: d.files.hidden,
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
        Ok(())
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
        // An `index_too_large` names the bridle.yaml key to raise, not bridle-memory's field.
        config.limit_names = bridle_memory::LimitNames {
            max_total_bytes: "`memory.indexing.max_total_bytes` in bridle.yaml".into(),
            max_files: "`memory.indexing.max_files` in bridle.yaml".into(),
            max_chunks: "`memory.indexing.max_chunks` in bridle.yaml".into(),
        };
        config
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
        assert_eq!(ours.clone_timeout, theirs.clone_timeout);
        // The settings this section does not name are left as they are.
        assert_eq!(ours.collection, theirs.collection);
        assert_eq!(ours.batch_size, theirs.batch_size);
        assert_eq!(ours.summaries, theirs.summaries);
        IndexingSection::default().check().unwrap();
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
            "{EMBEDDER}  indexing:\n    max_total_bytes: 1048576\n    max_chunks: 10\n    clone_timeout_secs: 30\n    hidden: true\n"
        ))
        .unwrap()
        .memory
        .unwrap();
        let expected = IndexingSection {
            max_total_bytes: 1_048_576,
            max_chunks: 10,
            clone_timeout_secs: 30,
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
        assert!(patterns.files.hidden);
    }

    #[test]
    fn a_default_section_is_not_written_out_and_a_set_one_round_trips() {
        let section: MemorySection =
            serde_saphyr::from_str("embedder: {ollama: {url: u, model: m}}").unwrap();
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
            serde_saphyr::from_str("embedder: {ollama: {url: u, model: m}}").unwrap();
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
            hidden in any::<bool>(),
        ) {
            let section = IndexingSection {
                max_file_bytes, max_files, max_total_bytes, max_chunks, clone_timeout_secs, hidden,
            };
            if section.check().is_ok() {
                let c = section.pattern_config();
                prop_assert!(c.files.max_file_bytes <= c.files.max_total_bytes);
                prop_assert!(c.files.max_total_bytes <= MAX_TOTAL_BYTES_ACCEPTED);
                prop_assert_eq!(c.max_chunks, max_chunks);
                prop_assert_eq!(c.clone_timeout.as_secs(), clone_timeout_secs);
            }
        }
    }
}
