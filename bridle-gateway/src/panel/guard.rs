//! The panel's security layers, outermost first:
//!
//! - [`security_headers`]: a strict Content-Security-Policy (`default-src 'self'`, no inline
//!   script or style, `frame-ancestors 'none'`), `nosniff`, no referrer, no caching of pages;
//!   it also draws the error page for any [`PanelError`] below it;
//! - [`refuse_cross_site`]: every state-changing request (log-in included) must come from the
//!   panel's own origin: `Sec-Fetch-Site` says `same-origin` (or `none`, typed by the user), or,
//!   from a browser that does not send it, `Origin` names this host or an allowed origin. A
//!   request with neither header is not from a browser and carries no session cookie a browser
//!   would attach; the `SameSite=Strict` cookie covers what is left. No token field is needed in
//!   forms, so htmx requests and plain forms are checked alike. (No maintained crate does this
//!   check for axum; it is a dozen lines, following the Fetch Metadata resource-isolation
//!   policy.)
//! - [`require_session`]: the session cookie names a live session, whose admin is handed to the
//!   handler; a change from an admin who may only watch is refused here, before any handler. A
//!   live list's own refresh (marked with [`LIVE_REFRESH`]) does not count as use, so an
//!   unattended page does not keep an idle session open.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;

use super::Panel;
use super::session::SignedIn;
use super::view::{EndSession, ErrorReport, Page, PanelError, chrome};

/// The Content-Security-Policy of every panel response.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
base-uri 'none'; object-src 'none'";

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether the request is an htmx one (it wants a partial, not a page).
pub(crate) fn is_htmx(headers: &HeaderMap) -> bool {
    headers.get("hx-request").is_some_and(|v| v == "true")
}

/// The header a live list's own fetches carry (`hx-headers` on the list): such a fetch is the
/// page's, not the admin's, and does not count as use of the session.
pub(crate) const LIVE_REFRESH: &str = "bridle-live-refresh";

/// Whether the request is a live list fetching its rows again on its own (a read, from htmx).
fn is_live_refresh(method: &Method, headers: &HeaderMap) -> bool {
    is_safe(method) && is_htmx(headers) && headers.get(LIVE_REFRESH).is_some_and(|v| v == "1")
}

/// The values of the request's cookies named `name`, in the order the browser sent them. A
/// browser sends every cookie of that name it holds: besides the panel's own, one planted by
/// another site on the same host (another port: cookies do not tell ports apart) with a longer
/// path, which comes first. So none of them is taken for the session on its own.
pub(crate) fn session_cookies(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// The first of the request's session cookies that names a live session, with that session's
/// id. Finding it counts as use of the session, unless `quiet` (what a page asks on its own).
pub(crate) fn live_session(
    panel: &Panel,
    headers: &HeaderMap,
    quiet: bool,
) -> Option<(String, SignedIn)> {
    session_cookies(headers, panel.config.cookie_name())
        .into_iter()
        .find_map(|id| {
            let who = if quiet {
                panel.sessions.peek(&id)
            } else {
                panel.sessions.get(&id)
            };
            who.map(|who| (id, who))
        })
}

/// Adds the security headers; draws errors raised below.
pub(crate) async fn security_headers(
    State(panel): State<Panel>,
    request: Request,
    next: Next,
) -> Response {
    let htmx = is_htmx(request.headers());
    let mut response = next.run(request).await;
    if let Some(report) = response.extensions().get::<ErrorReport>().cloned() {
        let cookies: Vec<HeaderValue> = response
            .headers()
            .get_all(header::SET_COOKIE)
            .iter()
            .cloned()
            .collect();
        response = draw_error(
            &panel,
            &report,
            htmx,
            response.extensions().get::<SignedIn>(),
        );
        for cookie in cookies {
            response.headers_mut().append(header::SET_COOKIE, cookie);
        }
    }
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

fn draw_error(panel: &Panel, report: &ErrorReport, htmx: bool, who: Option<&SignedIn>) -> Response {
    let base = &panel.config.base_path;
    if report.code == "session_ended" || report.code == "signed_out" {
        let login = format!("{base}/login");
        if htmx {
            let mut r = StatusCode::UNAUTHORIZED.into_response();
            if let Ok(v) = HeaderValue::from_str(&login) {
                r.headers_mut().insert("hx-redirect", v);
            }
            return r;
        }
        return super::view::see_other(&login);
    }
    let ctx = context! {
        ..chrome(base, who.map(|w| w.admin.as_str()), who.is_some_and(|w| w.may_change), ""),
        ..context! {
            status => report.status.as_u16(),
            reason => report.status.canonical_reason().unwrap_or("Error"),
            code => &report.code,
            detail => &report.detail,
            problem => Serde(&report.problem),
        }
    };
    let template = if htmx {
        "partials/problem.html"
    } else {
        "error.html"
    };
    let mut response = match panel.views.render(template, ctx) {
        Ok(html) => Page {
            status: report.status,
            html,
        }
        .into_response(),
        Err(_) => (report.status, report.detail.clone()).into_response(),
    };
    if htmx {
        // An error is never swapped into the row or pane that asked: it goes to the page's
        // message area.
        let h = response.headers_mut();
        h.insert("hx-retarget", HeaderValue::from_static("#flash"));
        h.insert("hx-reswap", HeaderValue::from_static("innerHTML"));
    }
    response
}

/// Refuses state-changing requests that come from another site.
pub(crate) async fn refuse_cross_site(
    State(panel): State<Panel>,
    request: Request,
    next: Next,
) -> Response {
    if is_safe(request.method()) || same_origin(&panel, request.headers()) {
        return next.run(request).await;
    }
    tracing::warn!(
        method = %request.method(),
        path = request.uri().path(),
        origin = ?request.headers().get(header::ORIGIN),
        sec_fetch_site = ?request.headers().get("sec-fetch-site"),
        "panel refused a cross-site request"
    );
    PanelError::CrossSite.into_response()
}

fn same_origin(panel: &Panel, headers: &HeaderMap) -> bool {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    if let Some(origin) = origin
        && panel.config.allowed_origins.contains(origin)
    {
        return true;
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        return site == "same-origin" || site == "none";
    }
    match origin {
        None => true,
        Some(origin) => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
            let origin_host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
        }
    }
}

/// Admits requests of a live session; the rest go to the log-in page.
pub(crate) async fn require_session(
    State(panel): State<Panel>,
    mut request: Request,
    next: Next,
) -> Response {
    // A live list's own refresh is not the admin at work: it must not keep an idle session open.
    let automatic = is_live_refresh(request.method(), request.headers());
    let Some((id, who)) = live_session(&panel, request.headers(), automatic) else {
        return signed_out(&panel, &request);
    };
    if !is_safe(request.method()) && !who.may_change {
        let mut r = PanelError::ReadOnly.into_response();
        r.extensions_mut().insert(who);
        return r;
    }
    request.extensions_mut().insert(who.clone());
    let mut response = next.run(request).await;
    if response.extensions().get::<EndSession>().is_some() {
        panel.sessions.end(&id);
        if let Ok(v) = HeaderValue::from_str(&clear_cookie(&panel)) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    } else {
        response.extensions_mut().insert(who);
    }
    response
}

fn signed_out(panel: &Panel, request: &Request) -> Response {
    let base = &panel.config.base_path;
    if is_htmx(request.headers()) || !is_safe(request.method()) {
        let report = ErrorReport {
            status: StatusCode::UNAUTHORIZED,
            code: "signed_out".into(),
            detail: "you are not signed in".into(),
            problem: None,
        };
        let mut r = StatusCode::UNAUTHORIZED.into_response();
        r.extensions_mut().insert(report);
        return r;
    }
    // Inside the nested router the path is relative to the base path.
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| *p != "/")
        .unwrap_or("");
    let next = serde_urlencoded::to_string([("next", format!("{base}{path}"))]).unwrap_or_default();
    super::view::see_other(&format!("{base}/login?{next}"))
}

/// The `Set-Cookie` value that opens a session.
pub(crate) fn session_cookie_header(panel: &Panel, id: &str) -> String {
    let c = &panel.config;
    format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        c.cookie_name(),
        c.session_lifetime.as_secs(),
        if c.behind_tls { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub(crate) fn clear_cookie(panel: &Panel) -> String {
    let c = &panel.config;
    format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        c.cookie_name(),
        if c.behind_tls { "; Secure" } else { "" }
    )
}
