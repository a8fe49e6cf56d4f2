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

use bridle_gateway::audit::{Change, Entry, Kind, Surface};

use crate::audit::record_offline;
use crate::client::{AdminClient, seg};
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
        /// How long the previous version stays usable, in seconds (at most 30
        /// days, as through the admin API).
        #[arg(
            long,
            default_value_t = 0,
            value_parser = clap::value_parser!(u64).range(..=bridle_gateway::admin::MAX_GRACE_SECS)
        )]
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
            record_offline(
                dir,
                Entry::user(who(None), Surface::Cli, Kind::SecretCreate)
                    .subject(format!("{name} v{v}")),
            );
            println!("created `{name}` version {v}");
        }
        SecretsCommand::Rotate {
            name,
            from_file,
            grace_secs,
        } => {
            let value = read_value(from_file.as_deref())?;
            let v = vault.rotate(&name, &value, &actor, Duration::from_secs(grace_secs))?;
            record_offline(
                dir,
                Entry::user(who(None), Surface::Cli, Kind::SecretRotate)
                    .subject(format!("{name} v{v}"))
                    .change(Change::revisions((v - 1).to_string(), v.to_string())),
            );
            println!("`{name}` is now at version {v}");
        }
        SecretsCommand::Revoke { name, version } => {
            vault.revoke(&name, version, &actor)?;
            record_offline(
                dir,
                Entry::user(who(None), Surface::Cli, Kind::SecretRevoke)
                    .subject(format!("{name} v{version}")),
            );
            println!("revoked `{name}` version {version}");
        }
        SecretsCommand::Import { from } => {
            let from = from.unwrap_or_else(|| config.secrets_path(dir));
            let r = vault.import_folder(&from, &actor)?;
            println!(
                "imported {} from {} ({} unchanged, {} differ and were left as the vault has them{})",
                kberg_core::counted(r.imported.len() as u64, "secret", "secrets"),
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

/// The same commands through a running gateway's admin API (`import` reads the gateway host's
/// folder, so it stays offline).
pub(crate) fn secrets_remote(
    api: &AdminClient,
    command: SecretsCommand,
) -> Result<ExitCode, BoxError> {
    match command {
        SecretsCommand::List { json } => {
            let list = api.all("/secrets")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("the vault holds no secrets");
            } else {
                for s in list {
                    println!(
                        "{} v{} (created {} by {}, last used {})",
                        s["name"].as_str().unwrap_or("?"),
                        s["active_version"].as_u64().unwrap_or(0),
                        s["created_at"].as_str().unwrap_or("?"),
                        s["created_by"].as_str().unwrap_or("?"),
                        s["last_used_at"].as_str().unwrap_or("never"),
                    );
                }
            }
        }
        SecretsCommand::Create { name, from_file } => {
            let value = read_value(from_file.as_deref())?;
            let value = value
                .expose_str()
                .ok_or("the admin API takes UTF-8 values; store binary values offline")?;
            let m = api.post(
                "/secrets",
                Some(serde_json::json!({ "name": name, "value": value })),
            )?;
            println!(
                "created `{name}` version {}",
                m["active_version"].as_u64().unwrap_or(0)
            );
        }
        SecretsCommand::Rotate {
            name,
            from_file,
            grace_secs,
        } => {
            let value = read_value(from_file.as_deref())?;
            let value = value
                .expose_str()
                .ok_or("the admin API takes UTF-8 values; store binary values offline")?;
            let m = api.post(
                &format!("/secrets/{}/rotate", seg(&name)),
                Some(serde_json::json!({ "value": value, "grace_secs": grace_secs })),
            )?;
            println!(
                "`{name}` is now at version {}",
                m["active_version"].as_u64().unwrap_or(0)
            );
        }
        SecretsCommand::Revoke { name, version } => {
            api.post(
                &format!("/secrets/{}/versions/{version}/revoke", seg(&name)),
                None,
            )?;
            println!("revoked `{name}` version {version}");
        }
        SecretsCommand::Import { .. } => {
            return Err(
                "`secrets import` reads a folder on the gateway's host: run it there without --url"
                    .into(),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
