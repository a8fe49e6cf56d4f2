//! The published JSON Schema (`schema/rules.schema.json`) must be what the types generate.
//! Regenerate with `BRIDLE_UPDATE_GOLDEN=1 cargo test -p bridle-rules --test schema`.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::path::Path;

#[test]
fn published_schema_is_up_to_date() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/rules.schema.json");
    let mut generated = serde_json::to_string_pretty(&bridle_rules::json_schema()).unwrap();
    generated.push('\n');
    if std::env::var_os("BRIDLE_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    // Compared as JSON values: key order depends on whether serde_json's `preserve_order`
    // is on, which feature unification decides by what else is in the build.
    let published: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        published == bridle_rules::json_schema(),
        "schema/rules.schema.json is stale; regenerate with BRIDLE_UPDATE_GOLDEN=1"
    );
}

#[test]
fn schema_describes_the_document() {
    let s = bridle_rules::json_schema();
    assert_eq!(s["title"], "Bridle rules document");
    let required = s["required"].as_array().unwrap();
    assert!(required.iter().any(|r| r == "schema_version"));
    assert!(required.iter().any(|r| r == "project"));
    assert!(s["properties"]["guardrails"].is_object());
    let text = s.to_string();
    assert!(text.contains("hard-instruction"));
}

#[test]
fn the_published_schema_accepts_good_documents_and_rejects_bad_ones() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/rules.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shop.yaml");
    let doc: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");

    let mut bad = doc.clone();
    bad["guardrails"][0]["severity"] = "maybe".into();
    assert!(!validator.is_valid(&bad));
    let mut bad = doc.clone();
    bad["project"]["colour"] = "red".into();
    assert!(!validator.is_valid(&bad));
    let mut bad = doc;
    bad.as_object_mut().unwrap().remove("schema_version");
    assert!(!validator.is_valid(&bad));
}
