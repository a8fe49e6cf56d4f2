//! The names the vault accepts.
//!
//! Secret and agent names end up in SQL rows, audit records, log lines, file names of read-only
//! sources and secret references, so they are kept to a small, printable charset: 1 to 128
//! characters of ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit (which
//! also rules out `.`, `..` and hidden files). Actors (who did an operation) are free text of 1
//! to 256 characters without control characters.

use super::error::VaultError;

/// The longest secret or agent name.
pub const MAX_NAME_LEN: usize = 128;
/// The longest actor.
pub const MAX_ACTOR_LEN: usize = 256;

/// Checks a secret or agent name against the allowed charset.
pub(crate) fn check_name(kind: &'static str, name: &str) -> Result<(), VaultError> {
    let refuse = |reason| {
        Err(VaultError::InvalidName {
            kind,
            name: name.chars().take(MAX_NAME_LEN + 8).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return refuse("it is longer than 128 characters");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return refuse("it must start with an ASCII letter or digit");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return refuse("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Whether `name` is a valid secret or agent name.
pub fn is_valid_name(name: &str) -> bool {
    check_name("secret", name).is_ok()
}

/// Checks the actor recorded for an operation.
pub(crate) fn check_actor(actor: &str) -> Result<(), VaultError> {
    if actor.is_empty() {
        return Err(VaultError::InvalidActor("it is empty"));
    }
    if actor.len() > MAX_ACTOR_LEN {
        return Err(VaultError::InvalidActor("it is longer than 256 bytes"));
    }
    if actor.chars().any(char::is_control) {
        return Err(VaultError::InvalidActor("it contains control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "a",
            "gitea-token",
            "GITEA_TOKEN",
            "k.v-1_2",
            &"x".repeat(128),
        ] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "-x",
            "a b",
            "a/b",
            "é",
            &"x".repeat(129),
        ] {
            let err = check_name("secret", bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_name");
        }
    }

    #[test]
    fn actors() {
        assert!(check_actor("admin:alice").is_ok());
        assert!(check_actor("").is_err());
        assert!(check_actor("a\nb").is_err());
        assert!(check_actor(&"a".repeat(257)).is_err());
    }
}
