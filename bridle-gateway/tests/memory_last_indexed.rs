//! `last_indexed` written back after an index of an example that no project is named for (the
//! `refresh_pattern_example` tool's case): every project listing the example gets it, also when
//! another project's document does not load.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use bridle_gateway::memory::write_last_indexed;
use bridle_memory::IndexReport;
use bridle_rules::{AgentCatalog, RulesStore};

const LISTS_THE_EXAMPLE: &str = "schema_version: 2
project:
  name: Shop
patterns:
  custom:
    - name: modified-mvc
      example_repos:
        - url: https://git.example.invalid/acme/shop-reference
          reference_tag: shop-ref
          arch_tag: modified-mvc
";

#[test]
fn a_project_that_does_not_load_does_not_keep_the_others_from_their_write_back() {
    let data = tempfile::tempdir().unwrap();
    let store = RulesStore::open(data.path(), AgentCatalog::builtin()).unwrap();
    let projects = data.path().join("projects");
    std::fs::create_dir_all(&projects).unwrap();
    // Sorted first: a document with a typo, being fixed by hand.
    std::fs::write(
        projects.join("a-broken.yaml"),
        "schema_version: 2\nproject: {name: x}\npermissions:\n  claud: {}\n",
    )
    .unwrap();
    std::fs::write(projects.join("shop.yaml"), LISTS_THE_EXAMPLE).unwrap();
    let report = IndexReport {
        reference_tag: "shop-ref".into(),
        arch_tag: "modified-mvc".into(),
        source_repo: "https://git.example.invalid/acme/shop-reference".into(),
        files: 3,
        chunks: 9,
        replaced: 0,
        last_indexed: "2026-12-06T09:00:00Z".into(),
    };
    let changed = write_last_indexed(&store, None, &report, "bridle-memory").unwrap();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].0, "shop");
    let doc = store.load("shop").unwrap().document;
    assert_eq!(
        doc.patterns.custom[0].example_repos[0]
            .last_indexed
            .as_deref(),
        Some("2026-12-06T09:00:00Z")
    );
    // Naming the broken project still reports its error.
    let err = write_last_indexed(&store, Some("a-broken"), &report, "x").unwrap_err();
    assert_eq!(err.code(), "invalid_document", "{err}");
}
