//! The admin credential `bridle serve` starts the admin API with: kept in the vault, created
//! and shown once on first start, or read from a file (a Docker secret).
//!
//! In the vault an admin's credential is the secret `admin-token.<name>` (sealed like every
//! other secret). [`VaultAdmins`] checks a presented token against the vault's current value on
//! every request, so rotating or revoking the secret (`bridle secrets rotate
//! admin-token.admin`) applies at once. The secrets resource of the API does not list or touch
//! these names: an admin cannot lock everyone out through the API by accident. Admin tokens
//! start with `bda_` (agent tokens with `bdl_`), so a token's kind is visible at a glance.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::auth::{
    AdminCredentials, AdminIdentity, AdminTokens, CredentialsError, long_enough, read_token_file,
};
use crate::vault::{SecretValue, Vault, VaultError};

/// The prefix of the vault secrets that hold admin credentials.
pub const ADMIN_SECRET_PREFIX: &str = "admin-token.";

/// The prefix of every admin token the gateway creates.
pub const ADMIN_TOKEN_PREFIX: &str = "bda_";

/// The vault secret that holds `admin`'s credential.
pub fn admin_secret_name(admin: &str) -> String {
    format!("{ADMIN_SECRET_PREFIX}{admin}")
}

/// Whether a vault secret name is an admin credential (hidden from the secrets resource).
pub fn is_admin_secret(name: &str) -> bool {
    name.starts_with(ADMIN_SECRET_PREFIX)
}

/// Admin credentials kept in the vault, checked against its current values on each request.
pub struct VaultAdmins {
    vault: Arc<Vault>,
    admins: Vec<String>,
}

impl std::fmt::Debug for VaultAdmins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultAdmins")
            .field("admins", &self.admins)
            .finish_non_exhaustive()
    }
}

impl VaultAdmins {
    /// The admins `admins`, each with its credential in `vault`.
    pub fn new(vault: Arc<Vault>, admins: Vec<String>) -> Self {
        Self { vault, admins }
    }
}

impl AdminCredentials for VaultAdmins {
    fn verify(&self, token: &str) -> Option<AdminIdentity> {
        let mut found = None;
        for name in &self.admins {
            match self.vault.current(&admin_secret_name(name)) {
                Ok(current) => {
                    if bool::from(current.value.expose().ct_eq(token.as_bytes())) {
                        found = Some(name.clone());
                    }
                }
                // Revoked or missing: this admin is locked out until a new value is set.
                Err(VaultError::SecretNotFound(_) | VaultError::NoActiveVersion(_)) => {}
                Err(e) => {
                    tracing::warn!(admin = %name, error = %e, "the vault could not check an admin credential");
                }
            }
        }
        found.map(AdminIdentity::new)
    }
}

/// A new admin token: `bda_` and 32 random bytes, URL-safe base64.
pub fn generate_admin_token() -> Result<SecretValue, CredentialsError> {
    let mut raw = Zeroizing::new([0u8; 32]);
    getrandom::fill(raw.as_mut()).map_err(|e| CredentialsError::Random(e.to_string()))?;
    let mut token = String::with_capacity(ADMIN_TOKEN_PREFIX.len() + 43);
    token.push_str(ADMIN_TOKEN_PREFIX);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(raw.as_ref(), &mut token);
    Ok(SecretValue::new(token.into_bytes()))
}

/// Why the admin credential could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminSetupError {
    /// The vault refused.
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// The token file, or randomness.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
}

/// Makes sure the vault holds a credential for `admin`: returns the new token when it was just
/// created (show it once; it is not printed again), `None` when one exists.
pub fn ensure_vault_admin(
    vault: &Vault,
    admin: &str,
    actor: &str,
) -> Result<Option<SecretValue>, AdminSetupError> {
    let name = admin_secret_name(admin);
    match vault.get(&name) {
        Ok(_) => Ok(None),
        Err(VaultError::SecretNotFound(_)) => {
            let token = generate_admin_token()?;
            vault.create(&name, &token, actor)?;
            tracing::info!(admin, "admin credential created in the vault");
            Ok(Some(token))
        }
        Err(e) => Err(e.into()),
    }
}

/// The longest admin token file read ([`admin_from_file`]): one token, however padded.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// One admin whose token is the content of `path` (surrounding whitespace removed), as a
/// Docker secret holds it. A token shorter than
/// [`MIN_TOKEN_FILE_CHARS`](super::auth::MIN_TOKEN_FILE_CHARS) characters is refused, as is a
/// file longer than [`MAX_TOKEN_FILE_BYTES`].
pub fn admin_from_file(admin: &str, path: &Path) -> Result<AdminTokens, CredentialsError> {
    let text = read_token_file(path, MAX_TOKEN_FILE_BYTES)?;
    let bad = |message: String| CredentialsError::Line {
        path: path.to_path_buf(),
        line: 1,
        message,
    };
    let token = text.trim();
    let mut tokens = AdminTokens::new()?;
    if !token.is_empty() {
        long_enough(admin, token).map_err(bad)?;
    }
    tokens.insert(admin, token).map_err(bad)?;
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::vault::{MasterKey, VaultConfig};

    #[test]
    fn a_vault_admin_is_created_once_and_checked_live() {
        let dir = tempfile::tempdir().unwrap();
        let key = MasterKey::generate().unwrap();
        let vault = Arc::new(
            Vault::open(&dir.path().join("vault.db"), &key, VaultConfig::default()).unwrap(),
        );
        let token = ensure_vault_admin(&vault, "admin", "test")
            .unwrap()
            .unwrap();
        let token = token.expose_str().unwrap().to_string();
        assert!(token.starts_with(ADMIN_TOKEN_PREFIX));
        assert!(
            ensure_vault_admin(&vault, "admin", "test")
                .unwrap()
                .is_none()
        );
        let admins = VaultAdmins::new(Arc::clone(&vault), vec!["admin".into()]);
        assert_eq!(admins.verify(&token).unwrap().name, "admin");
        assert!(admins.verify("bda_wrong").is_none());
        vault
            .revoke(&admin_secret_name("admin"), 1, "test")
            .unwrap();
        assert!(admins.verify(&token).is_none(), "revoked at once");
    }

    #[test]
    fn a_token_file_names_one_admin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bridle_admin_token");
        let token = "file-token-0123456789abcdef0123456789";
        std::fs::write(&path, format!("{token}\n")).unwrap();
        let t = admin_from_file("ops", &path).unwrap();
        assert_eq!(t.verify(token).unwrap().name, "ops");
        std::fs::write(&path, "\n").unwrap();
        assert!(admin_from_file("ops", &path).is_err());
        // Shorter than 32 characters: refused at load, the token not in the message.
        std::fs::write(&path, "file-token-123\n").unwrap();
        let err = admin_from_file("ops", &path).unwrap_err().to_string();
        assert!(err.contains("at least 32") && err.contains("ops"), "{err}");
        assert!(!err.contains("file-token-123"), "{err}");
        assert!(admin_from_file("ops", &dir.path().join("missing")).is_err());
    }
}
