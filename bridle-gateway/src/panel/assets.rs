//! The panel's static files, compiled into the binary: one stylesheet, one small script (the
//! confirm dialogs), htmx 2.0.11 exactly as published in the `htmx.org` npm package and its
//! SSE extension 2.2.4 exactly as published in `htmx-ext-sse` (`panel-assets/vendor/`, with
//! their licences). Each is served under a versioned name with a
//! long cache lifetime: a new file gets a new name. The vendored files carry their release
//! version; the panel's own stylesheet and script carry the first 12 hex digits of their SHA-256,
//! so a build that changes either is fetched anew by every browser that cached the old one.

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::Panel;

/// The htmx version vendored.
pub const HTMX_VERSION: &str = "2.0.11";

/// The version of htmx's SSE extension vendored.
pub const HTMX_SSE_VERSION: &str = "2.2.4";

const HTMX_SSE: &str = include_str!("../../panel-assets/vendor/htmx-ext-sse-2.2.4.min.js");

const HTMX: &str = include_str!("../../panel-assets/vendor/htmx-2.0.11.min.js");
const CSS: &str = include_str!("../../panel-assets/panel.css");
const JS: &str = include_str!("../../panel-assets/panel.js");

/// The assets' paths under the base path (the templates link them by these).
pub(crate) const HTMX_PATH: &str = "/assets/htmx-2.0.11.min.js";
pub(crate) const HTMX_SSE_PATH: &str = "/assets/htmx-ext-sse-2.2.4.min.js";
/// The stylesheet's path: its name carries a digest of its content.
pub(crate) static CSS_PATH: LazyLock<String> = LazyLock::new(|| content_path("panel", CSS, "css"));
/// The script's path: its name carries a digest of its content.
pub(crate) static JS_PATH: LazyLock<String> = LazyLock::new(|| content_path("panel", JS, "js"));

/// `/assets/{stem}-{first 12 hex digits of the SHA-256 of body}.{ext}`.
fn content_path(stem: &str, body: &str, ext: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(body.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("/assets/{stem}-{hex}.{ext}")
}

pub(crate) fn routes() -> Router<Panel> {
    Router::new()
        .route(
            HTMX_PATH,
            get(|| async { asset(HTMX, "text/javascript; charset=utf-8") }),
        )
        .route(
            HTMX_SSE_PATH,
            get(|| async { asset(HTMX_SSE, "text/javascript; charset=utf-8") }),
        )
        .route(
            CSS_PATH.as_str(),
            get(|| async { asset(CSS, "text/css; charset=utf-8") }),
        )
        .route(
            JS_PATH.as_str(),
            get(|| async { asset(JS, "text/javascript; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            ),
        ],
        body,
    )
        .into_response()
}
