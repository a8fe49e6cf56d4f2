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

/// The longest name an error text repeats: longer ones are described, not quoted.
const MAX_SHOWN_NAME_LEN: usize = 64;

/// The shortest part of a name (between `.`, `_` and `-`) that, mixing letters and digits, is
/// taken for random characters, and the shortest that is taken for them whatever it holds.
const RANDOM_PART_MIXED: usize = 16;
const RANDOM_PART_ANY: usize = 24;

/// How common credentials begin (GitHub, GitLab, Slack, AWS keys, JWTs, API keys, this
/// gateway's admin tokens).
const CREDENTIAL_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxa-",
    "xoxb-",
    "xoxe-",
    "xoxp-",
    "AKIA",
    "ASIA",
    "eyJ",
    "sk-",
    "sk_live_",
    "bda_",
];

/// Whether an error text may repeat `name`: it is short, and neither begins like a
/// credential nor holds a long run of random-looking characters. Anything else may be a
/// credential pasted where a secret's name belongs, and an error text reaches logs and API
/// answers. A name outside the names' charset that passes (`bad name`, a file of a folder being
/// imported) is still quoted, so the error says which; its control characters are escaped.
fn shows_as_a_name(name: &str) -> bool {
    if name.is_empty()
        || name.chars().count() > MAX_SHOWN_NAME_LEN
        || CREDENTIAL_PREFIXES.iter().any(|p| name.starts_with(p))
    {
        return false;
    }
    !name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|part| {
            let mixed = part.bytes().any(|b| b.is_ascii_digit())
                && part.bytes().any(|b| b.is_ascii_alphabetic());
            part.len() >= RANDOM_PART_ANY || (mixed && part.len() >= RANDOM_PART_MIXED)
        })
}

/// A secret's name as error texts show it: quoted in backticks (its control characters
/// escaped) when it looks like a name, else described by its length only
/// ([`shows_as_a_name`]).
pub(crate) struct ShownName<'a>(&'a str);

/// `name` as error texts show it.
pub(crate) fn shown_name(name: &str) -> ShownName<'_> {
    ShownName(name)
}

impl std::fmt::Display for ShownName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if shows_as_a_name(self.0) {
            write!(f, "`{}`", crate::logging::one_line(self.0))
        } else {
            write!(
                f,
                "(a name of {} characters, not shown: it does not look like a secret's name and may be a credential)",
                self.0.chars().count()
            )
        }
    }
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
    fn only_what_looks_like_a_name_is_quoted() {
        for name in [
            "gitea-token",
            "GITEA_TOKEN",
            "k.v-1_2",
            "agent-7.kanboard",
            "2024-05-01",
            // Outside the charset, but no credential: a file of a folder being imported.
            "bad name",
        ] {
            assert_eq!(shown_name(name).to_string(), format!("`{name}`"));
        }
        // Quoted escaped: a line break in a name does not break the error's line.
        assert_eq!(shown_name("line\nbreak").to_string(), "`line\\nbreak`");
        for pasted in [
            "ghp_CANARYc4n4ry0123456789abcdefCANARY99",
            "3f9a1c0e7b2d4a6f8e1c3b5d7f9a0c2e4b6d8f0a",
            "glpat-CaNaRy1234567890abcd",
            "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
            "pass word c4n4ry0123456789abc",
            "tok+3f9a1c0e7b2d4a6f8e1c3b5d/=",
            &"x".repeat(65),
        ] {
            let shown = shown_name(pasted).to_string();
            assert!(!shown.contains(pasted), "{shown}");
            assert!(shown.contains("not shown"), "{shown}");
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
