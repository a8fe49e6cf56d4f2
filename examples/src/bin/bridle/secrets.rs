//! `bridle secrets list|create|rotate|revoke|import`: the vault's secrets, on the data
//! directory (no running gateway needed: the vault is a SQLite file the gateway reads on every
//! use). Values are read from standard input or a file and are never printed; `list` shows
//! names, versions, dates, last use and fingerprints only.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use bridle_gateway::gateway::open_vault;
use bridle_gateway::vault::SecretValue;
use clap::Subcommand;

use crate::{BoxError, who};

#[derive(Debug, Subcommand)]
pub(crate) enum SecretsCommand {
    /// List the vault's secrets (metadata only; values are never shown).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a secret; its value is read from --from-file, else from standard input.
    Create {
        /// The secret's name.
        name: String,
        /// A file holding the value (trailing newlines are removed).
        #[arg(long)]
        from_file: Option<PathBuf>,
    },
    /// Make a new value the active version; the old one stays usable for --grace-secs.
    Rotate {
        /// The secret's name.
        name: String,
        /// A file holding the value (trailing newlines are removed).
        #[arg(long)]
        from_file: Option<PathBuf>,
        /// How long the previous version stays usable.
        #[arg(long, default_value_t = 0)]
        grace_secs: u64,
    },
    /// Destroy one version's ciphertext for good.
    Revoke {
        /// The secret's name.
        name: String,
        /// The version.
        version: u64,
    },
    /// Move every file of a secrets folder into the vault (the files are left in place).
    Import {
        /// The folder (default: the data directory's secrets folder).
        #[arg(long)]
        from: Option<PathBuf>,
    },
}

fn read_value(from_file: Option<&Path>) -> Result<SecretValue, BoxError> {
    let mut text = String::new();
    match from_file {
        Some(p) => {
            text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => {
            std::io::stdin().read_to_string(&mut text)?;
        }
    }
    let value = text.trim_end_matches(['\n', '\r']);
    if value.is_empty() {
        return Err("the value is empty; nothing was stored".into());
    }
    Ok(SecretValue::from(value))
}

pub(crate) fn secrets(dir: &Path, command: SecretsCommand) -> Result<ExitCode, BoxError> {
    let config = crate::load_config(dir)?;
    let (vault, created) = open_vault(dir, &config)?;
    if let Some(path) = created {
        eprintln!(
            "created the vault's master key at {} (mode 0600); back it up",
            path.display()
        );
    }
    let actor = format!("user:{} (cli)", who(None));
    match command {
        SecretsCommand::List { json } => {
            let list = vault.list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("the vault holds no secrets");
            } else {
                for s in list {
                    println!(
                        "{} v{} (created {} by {}, last used {})",
                        s.name,
                        s.active_version,
                        s.created_at,
                        s.created_by,
                        s.last_used_at
                            .map_or_else(|| "never".to_string(), |t| t.to_string())
                    );
                }
            }
        }
        SecretsCommand::Create { name, from_file } => {
            let value = read_value(from_file.as_deref())?;
            let v = vault.create(&name, &value, &actor)?;
            println!("created `{name}` version {v}");
        }
        SecretsCommand::Rotate {
            name,
            from_file,
            grace_secs,
        } => {
            let value = read_value(from_file.as_deref())?;
            let v = vault.rotate(&name, &value, &actor, Duration::from_secs(grace_secs))?;
            println!("`{name}` is now at version {v}");
        }
        SecretsCommand::Revoke { name, version } => {
            vault.revoke(&name, version, &actor)?;
            println!("revoked `{name}` version {version}");
        }
        SecretsCommand::Import { from } => {
            let from = from.unwrap_or_else(|| config.secrets_path(dir));
            let r = vault.import_folder(&from, &actor)?;
            println!(
                "imported {} secret(s) from {} ({} unchanged, {} differ and were left as the vault has them{})",
                r.imported.len(),
                from.display(),
                r.unchanged.len(),
                r.differs.len(),
                if r.differs.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.differs.join(", "))
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
