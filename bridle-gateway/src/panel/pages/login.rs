//! Log-in and log-out: an admin credential (the same token the admin API takes) is exchanged
//! for a session cookie; the credential stays on the server. Log-out ends the session and
//! removes the cookie. Failed log-ins are counted per client address and per credential in
//! the admin API's throttle, beside the bearer tokens the API refuses; past the limit the
//! log-in page answers 429 `too_many_logins` with `Retry-After`, without checking the
//! credential.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Extension, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use minijinja::context;
use serde::Deserialize;
use zeroize::{Zeroize, Zeroizing};

use super::{PanelForm, query_or_default};
use crate::panel::Panel;
use crate::panel::guard::{clear_cookie, live_session, session_cookie_header, session_cookies};
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError, chrome, see_other};

/// The log-in page's query: where to go after log-in, and whether the admin just signed out
/// (any value). The page is the way in, so it is always shown: a query that does not parse is
/// ignored, as a [`Notice`](super::Notice)'s is.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LoginQuery {
    next: Option<String>,
    signed_out: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for LoginQuery {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(query_or_default(parts))
    }
}

/// The log-in form.
#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
    #[serde(default)]
    next: Option<String>,
}

impl Drop for LoginForm {
    fn drop(&mut self) {
        self.token.zeroize();
    }
}

/// Where to go after log-in: a page of this panel, never another site. What lies beyond ASCII
/// is percent-encoded: a `Location` header carries ASCII only, and a browser would read raw
/// UTF-8 bytes there as Latin-1 and land elsewhere.
fn landing(panel: &Panel, next: Option<&str>) -> String {
    let base = &panel.config.base_path;
    next.filter(|n| {
        (n == base || n.starts_with(&format!("{base}/")))
            && !n.contains("//")
            && !n.contains('\\')
            && !n.chars().any(char::is_control)
            && !n.starts_with(&format!("{base}/login"))
    })
    .map(|n| percent_encoding::utf8_percent_encode(n, percent_encoding::CONTROLS).to_string())
    .unwrap_or_else(|| base.clone())
}

fn login_page(
    panel: &Panel,
    status: StatusCode,
    next: &str,
    error: Option<&str>,
    notice: Option<&str>,
) -> Result<Response, PanelError> {
    login_page_with(panel, status, next, error, notice, None)
}

fn login_page_with(
    panel: &Panel,
    status: StatusCode,
    next: &str,
    error: Option<&str>,
    notice: Option<&str>,
    code: Option<&str>,
) -> Result<Response, PanelError> {
    let ctx = context! {
        ..chrome(&panel.config.base_path, None, false, "login"),
        ..context! { next => next, error => error, notice => notice, code => code }
    };
    Ok(Page {
        status,
        html: panel.views.render("login.html", ctx)?,
    }
    .into_response())
}

/// `GET /login`.
pub(crate) async fn form(
    State(panel): State<Panel>,
    headers: HeaderMap,
    q: LoginQuery,
) -> Result<Response, PanelError> {
    let next = landing(&panel, q.next.as_deref());
    if live_session(&panel, &headers, false).is_some() {
        return Ok(see_other(&next));
    }
    let notice = q.signed_out.map(|_| "You are signed out.");
    login_page(&panel, StatusCode::OK, &next, None, notice)
}

/// `POST /login`. A successful log-in from a browser that still holds a session ends that
/// session: its cookie is replaced by the new one, and the old id would otherwise stay valid
/// server-side, unseen, until it is idle.
pub(crate) async fn submit(
    State(panel): State<Panel>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    PanelForm(form): PanelForm<LoginForm>,
) -> Result<Response, PanelError> {
    let next = landing(&panel, form.next.as_deref());
    let token = form.token.trim();
    let address = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    // Admitted before the check, so that guesses sent at once are checked no further than
    // the limit (those past it wait for the checks under way).
    let attempt = match panel.throttle.admit_form(address, token).await {
        Ok(attempt) => attempt,
        Err(throttled) => {
            let seconds = throttled.retry_after.as_secs().max(1);
            tracing::warn!(
                address = ?address,
                by = throttled.by,
                retry_after_s = seconds,
                "panel log-in throttled after repeated failures"
            );
            let minutes = seconds.div_ceil(60);
            let message = format!(
                "Too many failed log-ins {}. Try again in {minutes} minute{}.",
                if throttled.by == "address" {
                    "from your address"
                } else {
                    "with that credential"
                },
                if minutes == 1 { "" } else { "s" }
            );
            let mut response = login_page_with(
                &panel,
                StatusCode::TOO_MANY_REQUESTS,
                &next,
                Some(&message),
                None,
                Some("too_many_logins"),
            )?;
            if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return Ok(response);
        }
    };
    // A check may read the vault (a database, perhaps PostgreSQL over the network): it runs on
    // the blocking pool, as the admin API's own check does, not on an async worker it would
    // hold while it waits.
    let verified = if token.is_empty() {
        None
    } else {
        let credentials = std::sync::Arc::clone(&panel.credentials);
        let presented = Zeroizing::new(token.to_string());
        tokio::task::spawn_blocking(move || credentials.verify(&presented))
            .await
            .map_err(|e| {
                PanelError::Internal(crate::error::task_failed("the credential check", &e))
            })?
    };
    let Some(identity) = verified else {
        attempt.failed();
        tracing::warn!(address = ?address, "panel log-in refused: not an admin credential");
        return login_page(
            &panel,
            StatusCode::UNAUTHORIZED,
            &next,
            Some("That is not an admin credential."),
            None,
        );
    };
    let who = SignedIn {
        // The admin API's access rules marked the identity: a watcher, or a read-only API.
        may_change: identity.may_change,
        admin: identity.name,
        credential: Zeroizing::new(token.to_string()),
    };
    let id = panel
        .sessions
        .open(who)
        .map_err(|e| PanelError::Internal(e.to_string()))?;
    for replaced in session_cookies(&headers, panel.config.cookie_name()) {
        if replaced != id {
            panel.sessions.end(&replaced);
        }
    }
    let mut response = see_other(&next);
    let cookie = HeaderValue::from_str(&session_cookie_header(&panel, &id))
        .map_err(|_| PanelError::Internal("the session cookie is not a header value".into()))?;
    response.headers_mut().append(header::SET_COOKIE, cookie);
    Ok(response)
}

/// `POST /logout`: ends the session (if any) and removes the cookie.
pub(crate) async fn logout(State(panel): State<Panel>, headers: HeaderMap) -> Response {
    for id in session_cookies(&headers, panel.config.cookie_name()) {
        panel.sessions.end(&id);
    }
    let mut response = see_other(&panel.url("/login?signed_out=1"));
    if let Ok(v) = HeaderValue::from_str(&clear_cookie(&panel)) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}
