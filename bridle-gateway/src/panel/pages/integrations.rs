//! Integrations: each upstream MCP server's status, tools, project mapping and last error, and
//! turning one on or off at run time (the admin API's `…/enable` and `…/disable`: the state is
//! written to `bridle.yaml`, its tools leave or rejoin the agents' lists). Project mappings are
//! shown, not changed: the API cannot change them at run time yet.

use axum::extract::{Extension, State};
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;

use crate::admin::integrations::{IntegrationPage, IntegrationView};
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError, see_other};

use super::{Notice, PanelPath};

/// `GET /integrations`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
) -> Result<Page, PanelError> {
    let page: IntegrationPage = panel.api.get(&who, "/integrations?limit=500").await?;
    panel.page(
        &who,
        "integrations.html",
        "integrations",
        context! { integrations => Serde(page.items), more => page.next_cursor.is_some() },
    )
}

/// `GET /integrations/{namespace}`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(namespace): PanelPath<String>,
    notice: Notice,
) -> Result<Page, PanelError> {
    let i: IntegrationView = panel
        .api
        .get(&who, &format!("/integrations/{}", seg(&namespace)))
        .await?;
    panel.page(
        &who,
        "integration.html",
        "integrations",
        context! { i => Serde(i), notice => notice.text() },
    )
}

async fn switch(
    panel: &Panel,
    who: &SignedIn,
    namespace: &str,
    on: bool,
) -> Result<Response, PanelError> {
    let verb = if on { "enable" } else { "disable" };
    let _: IntegrationView = panel
        .api
        .post_empty(who, &format!("/integrations/{}/{verb}", seg(namespace)))
        .await?;
    Ok(see_other(&panel.url(&format!(
        "/integrations/{}?notice=integration_{verb}d",
        seg(namespace)
    ))))
}

/// `POST /integrations/{namespace}/enable`.
pub(crate) async fn enable(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(namespace): PanelPath<String>,
) -> Result<Response, PanelError> {
    switch(&panel, &who, &namespace, true).await
}

/// `POST /integrations/{namespace}/disable`.
pub(crate) async fn disable(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(namespace): PanelPath<String>,
) -> Result<Response, PanelError> {
    switch(&panel, &who, &namespace, false).await
}
