//! Integrations: each upstream MCP server's status, tools, project mapping and last error.
//! Read-only, as the admin API's resource is (enabling and mapping need a writable
//! configuration, which the gateway does not have yet).

use axum::extract::{Extension, Path, State};
use minijinja::context;
use minijinja::value::Serde;

use crate::admin::integrations::{IntegrationPage, IntegrationView};
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError};

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
    Path(namespace): Path<String>,
) -> Result<Page, PanelError> {
    let i: IntegrationView = panel
        .api
        .get(&who, &format!("/integrations/{}", seg(&namespace)))
        .await?;
    panel.page(
        &who,
        "integration.html",
        "integrations",
        context! { i => Serde(i) },
    )
}
