//! An upstream's paginated lists (tools, prompts, resources, resource templates), read within
//! bounds. rmcp's `list_all_*` follow the upstream's cursor for as long as it gives one; an
//! upstream whose list never ends (a new cursor on every page, or the same one again) would
//! grow the list until the listing's timeout, at the pace of loopback. Here a list that repeats
//! a cursor, or has not ended after [`MAX_LIST_PAGES`] pages, fails as a malformed answer.

use std::future::Future;

use kberg_core::{PagesError, read_pages};
use rmcp::model::{PaginatedRequestParams, Prompt, Resource, ResourceTemplate, Tool};
use rmcp::service::{RoleClient, ServiceError};
use rmcp::{ErrorData, Peer};

/// The most pages of one list read from an upstream.
pub(crate) const MAX_LIST_PAGES: usize = 100;

/// Every page of a list, `what` naming it in the error of a list that does not end.
async fn all_pages<T, Fut>(
    what: &str,
    mut page: impl FnMut(Option<PaginatedRequestParams>) -> Fut,
) -> Result<Vec<T>, ServiceError>
where
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    read_pages(MAX_LIST_PAGES, |cursor| {
        page(Some(PaginatedRequestParams::default().with_cursor(cursor)))
    })
    .await
    .map_err(|e| match e {
        PagesError::Page(e) => e,
        PagesError::RepeatedCursor => malformed(format!("its {what} list repeats a page cursor")),
        PagesError::TooManyPages(n) => {
            malformed(format!("its {what} list did not end after {n} pages"))
        }
    })
}

fn malformed(message: String) -> ServiceError {
    ServiceError::McpError(ErrorData::internal_error(message, None))
}

/// The upstream's tools.
pub(super) async fn tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, ServiceError> {
    all_pages("tools", |p| async move {
        peer.list_tools(p).await.map(|r| (r.tools, r.next_cursor))
    })
    .await
}

/// The upstream's prompts.
pub(super) async fn prompts(peer: &Peer<RoleClient>) -> Result<Vec<Prompt>, ServiceError> {
    all_pages("prompts", |p| async move {
        peer.list_prompts(p)
            .await
            .map(|r| (r.prompts, r.next_cursor))
    })
    .await
}

/// The upstream's resources.
pub(super) async fn resources(peer: &Peer<RoleClient>) -> Result<Vec<Resource>, ServiceError> {
    all_pages("resources", |p| async move {
        peer.list_resources(p)
            .await
            .map(|r| (r.resources, r.next_cursor))
    })
    .await
}

/// The upstream's resource templates.
pub(super) async fn templates(
    peer: &Peer<RoleClient>,
) -> Result<Vec<ResourceTemplate>, ServiceError> {
    all_pages("resource templates", |p| async move {
        peer.list_resource_templates(p)
            .await
            .map(|r| (r.resource_templates, r.next_cursor))
    })
    .await
}
