//! The vault's secrets over the API: create, list and get metadata, rotate, revoke. Values go
//! in and never come out: no response, problem detail, log line or audit entry holds one (the
//! metadata carries a keyed fingerprint that tells two values apart without revealing either).
//!
//! The vault secrets that hold admin credentials (`admin-token.<name>`, see
//! [`super::credential`]) are not part of this resource: they are neither listed nor reachable
//! by name here.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::credential::is_admin_secret;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath, ApiQuery, paginate};
use super::{AdminState, blocking, grace_period, path, record};
use crate::audit::{Change, Kind};
use crate::vault::{SecretMeta, SecretValue, Vault};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/secrets"), get(list).post(create))
        .route(&path("/secrets/{name}"), get(get_one))
        .route(&path("/secrets/{name}/rotate"), post(rotate))
        .route(
            &path("/secrets/{name}/versions/{version}/revoke"),
            post(revoke),
        )
}

/// A secret's metadata: `name`, `active_version`, `created_by`, `created_at`, `last_used_at`
/// and `versions` (each `version`, `state` {`state`: active, grace, expired or revoked},
/// `fingerprint`, `created_by`, `created_at`, `last_used_at`). Never a value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecretView {
    /// The metadata.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub meta: SecretMeta,
}

/// A page of secrets, by name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecretPage {
    /// The secrets' metadata (see [`SecretView`]).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<SecretMeta>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging of the secrets.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SecretQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
}

/// A new secret. The value is moved into the vault and wiped from memory after use.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSecret {
    /// Its name: ASCII letters, digits, `.`, `_`, `-`, starting with a letter or digit.
    pub name: String,
    /// Its value (UTF-8 text).
    pub value: String,
}

impl std::fmt::Debug for CreateSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateSecret")
            .field("name", &self.name)
            .field("value", &crate::vault::REDACTED)
            .finish()
    }
}

/// A new value for a secret.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// The new value (UTF-8 text).
    pub value: String,
    /// How long the previous version stays usable, in seconds (default 0; at most 2592000,
    /// 30 days, else 422 `invalid_request`).
    #[serde(default)]
    #[schema(maximum = 2592000)]
    pub grace_secs: u64,
}

impl std::fmt::Debug for RotateSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotateSecret")
            .field("value", &crate::vault::REDACTED)
            .field("grace_secs", &self.grace_secs)
            .finish()
    }
}

/// The vault, or 503 `vault_unavailable`.
pub(crate) fn vault_of(s: &AdminState) -> Result<std::sync::Arc<Vault>, ApiError> {
    s.vault.clone().ok_or_else(|| ApiError::Unavailable {
        code: "vault_unavailable",
        detail: "this admin API was started without the gateway's vault".into(),
    })
}

fn reachable(name: &str) -> Result<(), ApiError> {
    if is_admin_secret(name) {
        return Err(ApiError::NotFound {
            code: "unknown_secret",
            detail: format!("secret {name} not found"),
        });
    }
    Ok(())
}

/// A secret's metadata read back after a change `done` to it was made and recorded. The change
/// is recorded whether or not the read works (a failed read must not leave a change made
/// without its audit entry); a read that failed is answered as the change made, in a sentence
/// that says so, with the read's code.
fn read_back(
    meta: Result<SecretMeta, crate::vault::VaultError>,
    name: &str,
    done: &str,
) -> Result<SecretMeta, ApiError> {
    meta.map_err(|e| {
        ApiError::Internal(format!(
            "secret {} was {done}, but reading it back failed ({}); `GET /secrets` shows it",
            crate::vault::shown_name(name),
            e.code()
        ))
    })
}

fn fingerprint_of(meta: &SecretMeta, version: u64) -> Option<String> {
    meta.versions
        .iter()
        .find(|v| v.version == version)
        .map(|v| v.fingerprint.clone())
}

/// Lists the secrets' metadata, by name.
#[utoipa::path(get, path = "/admin/api/v1/secrets", tag = "secrets",
    params(SecretQuery),
    responses(
        (status = 200, body = SecretPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<SecretQuery>,
) -> Result<axum::Json<SecretPage>, ApiError> {
    let vault = vault_of(&s)?;
    let all = blocking(move || Ok(vault.list()?)).await?;
    let visible: Vec<SecretMeta> = all
        .into_iter()
        .filter(|m| !is_admin_secret(&m.name))
        .collect();
    let page = paginate(visible, |m| m.name.clone(), q.cursor.as_deref(), q.limit)?;
    Ok(axum::Json(SecretPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// One secret's metadata.
#[utoipa::path(get, path = "/admin/api/v1/secrets/{name}", tag = "secrets",
    params(("name" = String, Path, description = "The secret's name")),
    responses(
        (status = 200, body = SecretView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    ApiPath(name): ApiPath<String>,
) -> Result<axum::Json<SecretView>, ApiError> {
    reachable(&name)?;
    let vault = vault_of(&s)?;
    let meta = blocking(move || Ok(vault.get(&name)?)).await?;
    Ok(axum::Json(SecretView { meta }))
}

/// Creates a secret (version 1). Its value is never returned.
#[utoipa::path(post, path = "/admin/api/v1/secrets", tag = "secrets",
    request_body = CreateSecret,
    responses(
        (status = 201, body = SecretView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "the name exists", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn create(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiJson(body): ApiJson<CreateSecret>,
) -> Result<(StatusCode, axum::Json<SecretView>), ApiError> {
    if is_admin_secret(&body.name) {
        return Err(ApiError::Invalid {
            code: "reserved_name",
            detail: format!(
                "secret names starting with `{}` hold admin credentials and are not managed here",
                super::credential::ADMIN_SECRET_PREFIX
            ),
            errors: Vec::new(),
        });
    }
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let CreateSecret { name, value } = body;
    let value = SecretValue::new(value.into_bytes());
    let meta = blocking(move || {
        vault.create(&name, &value, &admin.actor())?;
        let meta = vault.get(&name);
        let mut entry = admin
            .entry(Kind::SecretCreate)
            .subject(format!("{name} v1"));
        if let Some(f) = meta.as_ref().ok().and_then(|m| fingerprint_of(m, 1)) {
            entry = entry.change(Change::digest(f));
        }
        record(&ctx, entry, "the secret")?;
        read_back(meta, &name, "created")
    })
    .await?;
    Ok((StatusCode::CREATED, axum::Json(SecretView { meta })))
}

/// Makes a new value the active version; the previous one stays usable for `grace_secs`.
#[utoipa::path(post, path = "/admin/api/v1/secrets/{name}/rotate", tag = "secrets",
    params(("name" = String, Path, description = "The secret's name")),
    request_body = RotateSecret,
    responses(
        (status = 200, body = SecretView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn rotate(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<RotateSecret>,
) -> Result<axum::Json<SecretView>, ApiError> {
    reachable(&name)?;
    let grace = grace_period(body.grace_secs)?;
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let RotateSecret { value, .. } = body;
    let value = SecretValue::new(value.into_bytes());
    let meta = blocking(move || {
        let version = vault.rotate(&name, &value, &admin.actor(), grace)?;
        // The version this rotation replaced: the active version is always the newest (a
        // rotation adds the next number and makes it active, in one transaction), so it is the
        // one just before. Read apart from the rotation, it could be an older one that a
        // concurrent rotation had already replaced.
        let before = version.saturating_sub(1);
        let meta = vault.get(&name);
        let entry = admin
            .entry(Kind::SecretRotate)
            .subject(format!("{name} v{version}"))
            .change(Change {
                before: Some(before.to_string()),
                after: Some(version.to_string()),
                digest: meta.as_ref().ok().and_then(|m| fingerprint_of(m, version)),
            });
        record(&ctx, entry, "the rotation")?;
        read_back(meta, &name, "rotated")
    })
    .await?;
    Ok(axum::Json(SecretView { meta }))
}

/// Destroys one version's ciphertext for good.
#[utoipa::path(post, path = "/admin/api/v1/secrets/{name}/versions/{version}/revoke", tag = "secrets",
    params(
        ("name" = String, Path, description = "The secret's name"),
        ("version" = u64, Path, description = "The version"),
    ),
    responses(
        (status = 200, body = SecretView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "already revoked", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no secret may have", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn revoke(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((name, version)): ApiPath<(String, u64)>,
) -> Result<axum::Json<SecretView>, ApiError> {
    reachable(&name)?;
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let meta = blocking(move || {
        vault.revoke(&name, version, &admin.actor())?;
        let meta = vault.get(&name);
        let mut entry = admin
            .entry(Kind::SecretRevoke)
            .subject(format!("{name} v{version}"));
        if let Some(f) = meta.as_ref().ok().and_then(|m| fingerprint_of(m, version)) {
            entry = entry.change(Change::digest(f));
        }
        record(&ctx, entry, "the revocation")?;
        read_back(meta, &name, "revoked")
    })
    .await?;
    Ok(axum::Json(SecretView { meta }))
}
