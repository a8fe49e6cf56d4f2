//! The one way an admin's decision on a waiting item is made and answered: a proposal of the
//! review queue approved or rejected, a scope ticket approved or denied. The store decides
//! (exactly one of two concurrent decisions wins, the other is 409 `already_decided`), the
//! decision is logged and recorded as a `user` audit entry, and the decided item is the answer.

use axum::Json;

use super::auth::AdminActor;
use super::error::ApiError;
use super::{AdminState, blocking, record};
use crate::audit::{Entry, Kind};
use crate::context::GatewayContext;

/// Makes a decision off the async threads and answers with the decided item as `V`.
///
/// `decide` runs the store's decision under the admin's actor (`admin:<name>@<surface>`);
/// `describe` adds what the decided item says (project, revisions, agent) to the audit entry of
/// `kind` about `subject`; `what` names the decision in the answer when its audit entry cannot
/// be written.
pub(crate) async fn decide_and_answer<T, V>(
    s: &AdminState,
    admin: AdminActor,
    kind: Kind,
    subject: String,
    what: &'static str,
    decide: impl FnOnce(&GatewayContext, &str) -> Result<T, ApiError> + Send + 'static,
    describe: impl FnOnce(&T, Entry) -> Entry + Send + 'static,
) -> Result<Json<V>, ApiError>
where
    T: Into<V> + Send + 'static,
    V: Send + 'static,
{
    let ctx = s.ctx.clone();
    blocking(move || {
        let decided = decide(&ctx, &admin.actor())?;
        tracing::info!(subject = ?subject, %kind, admin = %admin.identity.name, "decided through the admin API");
        let entry = describe(&decided, admin.entry(kind).subject(subject));
        record(&ctx, entry, what)?;
        Ok(Json(decided.into()))
    })
    .await
}
