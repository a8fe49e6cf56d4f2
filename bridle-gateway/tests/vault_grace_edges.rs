//! A rotation's grace period at the edges of the clock, on a SQLite vault: a grace of zero
//! ends the old version at once, and a grace longer than any date can say (`Duration::MAX`,
//! or `bridle secrets rotate --grace-secs` with a huge number) keeps it usable and is reported
//! as ending at the latest time the metadata can show, never as a date in the past.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::time::Duration;

use bridle_gateway::vault::{MasterKey, Vault, VaultConfig, VersionState};
use chrono::{DateTime, Utc};

fn open(dir: &std::path::Path) -> Vault {
    Vault::open(
        &dir.join("vault.db"),
        &MasterKey::from_bytes([9; 32]),
        VaultConfig::default(),
    )
    .expect("vault opens")
}

/// Before, an end past the last date `chrono` can hold was shown as 1970-01-01: a version in
/// grace for ever, or a token valid for ever, read as having ended before it began.
#[test]
fn an_endless_grace_is_reported_as_ending_in_the_future() {
    let dir = tempfile::tempdir().unwrap();
    let vault = open(dir.path());
    let before: DateTime<Utc> = Utc::now();
    for (i, grace) in [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_secs(10_000_000_000_000),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("s{i}");
        vault.create(&name, &"old".into(), "admin").unwrap();
        vault.rotate(&name, &"new".into(), "admin", grace).unwrap();
        assert_eq!(vault.version(&name, 1).unwrap().expose(), b"old");
        let meta = vault.get(&name).unwrap();
        match &meta.versions[0].state {
            VersionState::Grace { until } => assert!(*until > before, "{grace:?}: {until}"),
            other => panic!("{grace:?}: version 1 is {other:?}"),
        }
        let json = serde_json::to_value(&meta).unwrap();
        let until = json.to_string();
        assert!(!until.contains("1970"), "{until}");

        let agent = format!("agent{i}");
        let first = vault.set_agent_token(&agent, "admin").unwrap();
        vault.rotate_agent_token(&agent, grace, "admin").unwrap();
        let token = first.token.expose_str().unwrap();
        assert_eq!(
            vault.agent_for_token(token).unwrap().map(|m| m.version),
            Some(1)
        );
        let tokens = vault.agent_tokens(&agent).unwrap();
        assert!(tokens[0].valid, "{grace:?}");
        let valid_until = tokens[0].valid_until.expect("rotated out");
        assert!(valid_until > before, "{grace:?}: {valid_until}");
    }
}

#[test]
fn a_zero_grace_ends_the_old_version_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let vault = open(dir.path());
    vault.create("s", &"old".into(), "admin").unwrap();
    vault
        .rotate("s", &"new".into(), "admin", Duration::ZERO)
        .unwrap();
    assert_eq!(vault.version("s", 1).unwrap_err().code(), "version_expired");
    assert!(!vault.get("s").unwrap().versions[0].state.is_usable());

    let first = vault.set_agent_token("a", "admin").unwrap();
    vault
        .rotate_agent_token("a", Duration::ZERO, "admin")
        .unwrap();
    assert_eq!(
        vault
            .agent_for_token(first.token.expose_str().unwrap())
            .unwrap(),
        None
    );
    assert!(!vault.agent_tokens("a").unwrap()[0].valid);
}
