//! Secrets: add, rotate, revoke. Only names, versions, fingerprints, states, dates and last
//! use are ever shown; a value goes from the form to the API once and never comes back (a
//! refused form is shown again without it). Revoking a version asks for the secret's name in a
//! `<dialog>` first, and the server checks it again.

use axum::extract::{Extension, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use super::{Notice, PanelForm, PanelPath, confirm_matches};
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError, see_other};

/// One version of a secret (never its value).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct VersionView {
    version: u64,
    /// `{state: active | grace | expired | revoked, ...}` as the API gives it.
    state: serde_json::Value,
    fingerprint: String,
    created_by: String,
    created_at: String,
    last_used_at: Option<String>,
}

/// A secret's metadata.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SecretView {
    name: String,
    active_version: u64,
    created_by: String,
    created_at: String,
    last_used_at: Option<String>,
    versions: Vec<VersionView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SecretPage {
    items: Vec<SecretView>,
    next_cursor: Option<String>,
}

/// The add form. The value is wiped when the form is dropped.
#[derive(Deserialize)]
pub(crate) struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
}

impl Drop for CreateForm {
    fn drop(&mut self) {
        self.value.zeroize();
    }
}

/// The rotate form.
#[derive(Deserialize)]
pub(crate) struct RotateForm {
    #[serde(default)]
    value: String,
    #[serde(default)]
    grace_secs: Option<String>,
}

impl Drop for RotateForm {
    fn drop(&mut self) {
        self.value.zeroize();
    }
}

/// The revoke form: the secret's name typed again.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConfirmForm {
    #[serde(default)]
    confirm: String,
}

#[derive(Serialize)]
struct CreateBody<'a> {
    name: &'a str,
    value: &'a str,
}

#[derive(Serialize)]
struct RotateBody<'a> {
    value: &'a str,
    grace_secs: u64,
}

fn state_of(v: &VersionView) -> String {
    v.state
        .get("state")
        .and_then(|s| s.as_str())
        .or_else(|| v.state.as_str())
        .unwrap_or("unknown")
        .to_string()
}

/// Each version with its state as a word, for the templates.
fn described(secret: &SecretView) -> Vec<serde_json::Value> {
    secret
        .versions
        .iter()
        .map(|v| {
            serde_json::json!({
                "version": v.version,
                "state": state_of(v),
                "until": v.state.get("until"),
                "fingerprint": v.fingerprint,
                "created_by": v.created_by,
                "created_at": v.created_at,
                "last_used_at": v.last_used_at,
            })
        })
        .collect()
}

async fn list_page(
    panel: &Panel,
    who: &SignedIn,
    status: StatusCode,
    notice: Option<String>,
    new_name: &str,
    problem: Option<crate::panel::api::Problem>,
) -> Result<Page, PanelError> {
    let page: SecretPage = panel.api.get(who, "/secrets?limit=500").await?;
    let rows: Vec<_> = page
        .items
        .iter()
        .map(|s| serde_json::json!({ "secret": s, "versions": described(s) }))
        .collect();
    panel.page_with_status(
        who,
        status,
        "secrets.html",
        "secrets",
        context! {
            rows => Serde(rows),
            more => page.next_cursor.is_some(),
            notice => notice,
            new_name => new_name,
            problem => Serde(problem),
        },
    )
}

/// `GET /secrets`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    notice: Notice,
) -> Result<Page, PanelError> {
    list_page(&panel, &who, StatusCode::OK, notice.text(), "", None).await
}

/// `GET /secrets/{name}`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
    notice: Notice,
) -> Result<Page, PanelError> {
    let secret: SecretView = panel
        .api
        .get(&who, &format!("/secrets/{}", seg(&name)))
        .await?;
    let versions = described(&secret);
    panel.page(
        &who,
        "secret.html",
        "secrets",
        context! { s => Serde(secret), versions => Serde(versions), notice => notice.text() },
    )
}

/// `POST /secrets`: adds a secret; a refused form comes back with the name only.
pub(crate) async fn create(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelForm(form): PanelForm<CreateForm>,
) -> Result<Response, PanelError> {
    let name = form.name.trim().to_string();
    if form.value.is_empty() {
        return Err(PanelError::BadForm("a secret needs a value".into()));
    }
    let body = CreateBody {
        name: &name,
        value: &form.value,
    };
    match panel
        .api
        .call::<serde_json::Value>(&who, Method::POST, "/secrets", &body)
        .await
    {
        Ok(_) => Ok(see_other(
            &panel.url(&format!("/secrets/{}?notice=secret_created", seg(&name))),
        )),
        Err(p) if p.status == 401 => Err(PanelError::SessionEnded),
        Err(p) if p.is_missing_endpoint() => Err(p.into()),
        Err(p) => {
            let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::BAD_GATEWAY);
            Ok(list_page(&panel, &who, status, None, &name, Some(p))
                .await?
                .into_response())
        }
    }
}

/// `POST /secrets/{name}/rotate`: a new value; the old version stays usable for the grace
/// period.
pub(crate) async fn rotate(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(name): PanelPath<String>,
    PanelForm(form): PanelForm<RotateForm>,
) -> Result<Response, PanelError> {
    if form.value.is_empty() {
        return Err(PanelError::BadForm("a rotation needs the new value".into()));
    }
    let grace_secs = match form.grace_secs.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(g) => g.parse().map_err(|_| {
            PanelError::BadForm("the grace period is a whole number of seconds".into())
        })?,
    };
    panel
        .api
        .call::<serde_json::Value>(
            &who,
            Method::POST,
            &format!("/secrets/{}/rotate", seg(&name)),
            &RotateBody {
                value: &form.value,
                grace_secs,
            },
        )
        .await?;
    Ok(see_other(&panel.url(&format!(
        "/secrets/{}?notice=secret_rotated",
        seg(&name)
    ))))
}

/// `POST /secrets/{name}/versions/{version}/revoke`, once the admin typed the name.
pub(crate) async fn revoke(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((name, version)): PanelPath<(String, u64)>,
    PanelForm(form): PanelForm<ConfirmForm>,
) -> Result<Response, PanelError> {
    confirm_matches(&form.confirm, &name)?;
    panel
        .api
        .post_empty::<serde_json::Value>(
            &who,
            &format!("/secrets/{}/versions/{version}/revoke", seg(&name)),
        )
        .await?;
    Ok(see_other(&panel.url(&format!(
        "/secrets/{}?notice=secret_revoked&id={version}",
        seg(&name)
    ))))
}
