//! The type that holds a secret in memory.
//!
//! A [`SecretValue`] is the only way a plaintext secret leaves the vault. It prints (`Debug`,
//! `Display`) and serializes as `[redacted]`, so a secret that ends up in a log line, an error
//! or an API response by mistake shows nothing; its bytes are wiped when it is dropped; and the
//! value is reachable only through the explicit [`SecretValue::expose`] (or
//! [`SecretValue::expose_str`]), which makes every use easy to find in review.

use std::fmt;

use zeroize::Zeroizing;

/// What every secret prints and serializes as.
pub const REDACTED: &str = "[redacted]";

/// A secret value: redacted when printed or serialized, zeroized on drop.
///
/// ```
/// use bridle_gateway::vault::SecretValue;
///
/// let token = SecretValue::from("s3cr3t");
/// assert_eq!(format!("{token:?} {token}"), "[redacted] [redacted]");
/// assert_eq!(token.expose(), b"s3cr3t");
/// ```
#[derive(Clone)]
pub struct SecretValue(Zeroizing<Vec<u8>>);

impl SecretValue {
    /// Wraps bytes; they are wiped when the value is dropped.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// The plaintext bytes. Call only where the secret is put on the wire (a header, an
    /// environment variable); never log or store the result.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// The plaintext as UTF-8 text, or `None` if the bytes are not UTF-8 (tokens always are).
    pub fn expose_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The value's length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the value is empty (the vault never stores an empty value).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Equality in constant time (for equal lengths), so comparing a presented value with a stored
/// one does not reveal how many leading bytes matched.
impl PartialEq for SecretValue {
    fn eq(&self, other: &Self) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_slice().ct_eq(other.0.as_slice()).into()
    }
}

impl Eq for SecretValue {}

impl From<&str> for SecretValue {
    fn from(value: &str) -> Self {
        Self::new(value.as_bytes().to_vec())
    }
}

impl From<String> for SecretValue {
    fn from(value: String) -> Self {
        Self::new(value.into_bytes())
    }
}

impl From<Vec<u8>> for SecretValue {
    fn from(value: Vec<u8>) -> Self {
        Self::new(value)
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl serde::Serialize for SecretValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_and_serializes_redacted() {
        let v = SecretValue::from("canary-7f3a");
        assert_eq!(format!("{v:?}"), REDACTED);
        assert_eq!(format!("{v}"), REDACTED);
        assert_eq!(format!("{v:#?}"), REDACTED);
        assert_eq!(
            serde_json::to_string(&v).expect("a string serializes"),
            "\"[redacted]\""
        );
        assert_eq!(v.expose_str(), Some("canary-7f3a"));
    }

    #[test]
    fn non_utf8_is_exposed_as_bytes_only() {
        let v = SecretValue::new(vec![0xff, 0x00, 0x41]);
        assert_eq!(v.expose_str(), None);
        assert_eq!(v.expose(), &[0xff, 0x00, 0x41]);
        assert_eq!(v.len(), 3);
    }
}
