//! The vault's cryptography: key derivation, sealing, fingerprints and token hashes.
//!
//! One master key, four purposes, four keys: HKDF-SHA256 derives an AEAD key (XChaCha20-Poly1305
//! for values at rest), a fingerprint key (HMAC-SHA256 of values, for metadata and audit
//! records), a token key (HMAC-SHA256 of agent bearer tokens) and a check key (a key-check value
//! stored in the database, so a wrong master key is refused at open with a clear error instead
//! of failing row by row). Each sealed row's associated data binds the secret's name and version,
//! so a ciphertext copied onto another row, or a row renamed or renumbered, does not decrypt.
//! Nonces are 24 random bytes per seal, which XChaCha20 makes safe to draw at random.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::error::VaultError;
use super::key::MasterKey;
use super::value::SecretValue;

type HmacSha256 = Hmac<Sha256>;

/// The length of an XChaCha20-Poly1305 nonce.
pub(crate) const NONCE_LEN: usize = 24;
/// Hex digits of a value fingerprint shown in metadata (64 bits of a keyed HMAC).
pub(crate) const FINGERPRINT_HEX: usize = 16;

const HKDF_SALT: &[u8] = b"bridle-vault/v1";
const CHECK_MESSAGE: &[u8] = b"bridle-vault key check v1";

/// The keys derived from one master key.
pub(crate) struct VaultKeys {
    aead: XChaCha20Poly1305,
    fingerprint: Zeroizing<[u8; 32]>,
    token: Zeroizing<[u8; 32]>,
    check: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for VaultKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VaultKeys([redacted])")
    }
}

/// A sealed value: the nonce and the ciphertext with its tag.
pub(crate) struct Sealed {
    pub(crate) nonce: [u8; NONCE_LEN],
    pub(crate) ciphertext: Vec<u8>,
}

impl VaultKeys {
    /// Derives the four keys from the master key.
    pub(crate) fn derive(master: &MasterKey) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(HKDF_SALT), master.bytes());
        let expand = |info: &[u8]| {
            let mut okm = Zeroizing::new([0u8; 32]);
            hk.expand(info, okm.as_mut())
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            okm
        };
        let aead_key = expand(b"bridle-vault/v1 aead xchacha20poly1305");
        let aead = XChaCha20Poly1305::new(&Key::from(*aead_key));
        Self {
            aead,
            fingerprint: expand(b"bridle-vault/v1 fingerprint hmac-sha256"),
            token: expand(b"bridle-vault/v1 agent-token hmac-sha256"),
            check: expand(b"bridle-vault/v1 key-check hmac-sha256"),
        }
    }

    /// Encrypts `value` for the row (`name`, `version`).
    pub(crate) fn seal(
        &self,
        name: &str,
        version: u64,
        value: &SecretValue,
    ) -> Result<Sealed, VaultError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| VaultError::Randomness(e.to_string()))?;
        let aad = associated_data(name, version);
        let ciphertext = self
            .aead
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: value.expose(),
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::DecryptFailed {
                name: name.to_owned(),
                version,
            })?;
        Ok(Sealed { nonce, ciphertext })
    }

    /// Decrypts the row (`name`, `version`); refuses anything that does not authenticate.
    pub(crate) fn open(
        &self,
        name: &str,
        version: u64,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<SecretValue, VaultError> {
        let failed = || VaultError::DecryptFailed {
            name: name.to_owned(),
            version,
        };
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| failed())?;
        let aad = associated_data(name, version);
        self.aead
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map(SecretValue::new)
            .map_err(|_| failed())
    }

    /// The short fingerprint of a value: a keyed HMAC, hex, never the value or a prefix of it.
    pub(crate) fn fingerprint(&self, value: &[u8]) -> String {
        let mut hex = hmac_hex(self.fingerprint.as_ref(), value);
        hex.truncate(FINGERPRINT_HEX);
        hex
    }

    /// The full keyed hash of an agent bearer token (what the database stores).
    pub(crate) fn token_hash(&self, token: &[u8]) -> String {
        hmac_hex(self.token.as_ref(), token)
    }

    /// The key-check value stored in the database at creation.
    pub(crate) fn check_value(&self) -> String {
        hmac_hex(self.check.as_ref(), CHECK_MESSAGE)
    }
}

/// Associated data binding a ciphertext to its row: a label, the name's length and bytes, and
/// the version, so no two (name, version) pairs share an encoding.
fn associated_data(name: &str, version: u64) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + name.len());
    aad.extend_from_slice(b"bridle-vault/v1 secret\0");
    aad.extend_from_slice(&(name.len() as u32).to_be_bytes());
    aad.extend_from_slice(name.as_bytes());
    aad.extend_from_slice(&version.to_be_bytes());
    aad
}

fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(message);
    hex(&mac.finalize().into_bytes())
}

/// Lower-case hex of `bytes` (a few lines, so no hex crate).
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(byte: u8) -> VaultKeys {
        VaultKeys::derive(&MasterKey::from_bytes([byte; 32]))
    }

    #[test]
    fn seal_open_round_trip_and_binding() {
        let k = keys(1);
        let v = SecretValue::from("hunter2");
        let sealed = k.seal("gitea", 3, &v).expect("seals");
        assert!(!sealed.ciphertext.windows(7).any(|w| w == b"hunter2"));
        let back = k
            .open("gitea", 3, &sealed.nonce, &sealed.ciphertext)
            .expect("opens");
        assert_eq!(back, v);
        for (name, version) in [("gitea", 4), ("gitee", 3), ("gitea3", 3)] {
            let err = k
                .open(name, version, &sealed.nonce, &sealed.ciphertext)
                .expect_err("bound to its row");
            assert_eq!(err.code(), "decrypt_failed");
        }
        let err = keys(2)
            .open("gitea", 3, &sealed.nonce, &sealed.ciphertext)
            .expect_err("another key");
        assert_eq!(err.code(), "decrypt_failed");
    }

    #[test]
    fn derived_keys_differ_by_purpose_and_master() {
        let k = keys(1);
        assert_ne!(k.fingerprint(b"x"), k.token_hash(b"x")[..FINGERPRINT_HEX]);
        assert_ne!(k.check_value(), keys(2).check_value());
        assert_eq!(k.fingerprint(b"x").len(), FINGERPRINT_HEX);
        assert_eq!(k.token_hash(b"x").len(), 64);
    }
}
