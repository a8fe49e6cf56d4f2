//! Upstream resources and resource templates, forwarded under namespaced URIs.
//!
//! Resource URIs cannot take a `<namespace><separator>` prefix the way tool names do (a URI
//! starts with its scheme), so an upstream's URI `u` is exposed as `<namespace>+u`: the
//! namespace becomes the first part of a new scheme (`fs+file:///tmp/a.txt`,
//! `ev+demo://resource/static/document/x.md`). A scheme may contain `+`, so the result is still a
//! valid URI; a namespace may not, so the part before the first `+` is always exactly the
//! namespace and stripping `<namespace>+` gives back the upstream URI. Templates get the same
//! prefix (`fs+file:///{path}`), so an expanded template maps back the same way. An MCP App's
//! view (`ui://clock/app.html`) is the exception: a host renders a view only from a `ui://`
//! URI, so the namespace becomes the view's first part instead (`ui://up/clock/app.html`),
//! which maps back as well because a namespace has no `/`. What an entry says in its `_meta`
//! (a view's content security policy) passes on as it came.
//!
//! Reads are forwarded with the upstream's call timeout and the returned contents' URIs are
//! namespaced again. Subscriptions are relayed: while a namespaced URI has at least one
//! subscriber in the [`ResourceRegistry`] the aggregator holds one `resources/subscribe` on the
//! upstream (if it advertises `resources.subscribe`), and the upstream's
//! `notifications/resources/updated` becomes [`ResourceRegistry::notify_updated`] of the
//! namespaced URI, so exactly its subscribers hear it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{
    CoreError, Icon, ResourceContents, ResourceDescriptor, ResourceError, ResourceReader,
    ResourceRegistry, ResourceTemplate, TemplateVars,
};
// The aggregator's upstream sessions start with `initialize` (2025-11-25), where
// `resources/subscribe` and `resources/unsubscribe` are how updates are asked for; rmcp marks
// them deprecated only because 2026-07-28 replaced them.
#[allow(deprecated)]
use rmcp::model::{
    ClientRequest, ReadResourceRequest, ReadResourceRequestParams, ServerResult, SubscribeRequest,
    SubscribeRequestParams, UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RoleClient};
use serde::Deserialize;
use serde_json::Value;

use super::config::ConfigError;
use super::error::UpstreamError;
use super::forward::{forward, quoted, result_kind};
use super::front::Upstream;

/// The scheme of an MCP App's views: a host renders a view only from a `ui://` URI.
const UI_SCHEME: &str = "ui://";

/// The namespaced form of an upstream URI (or URI template): `<namespace>+<uri>`, except that
/// an MCP App's view keeps its `ui://` scheme, which is the only one a host renders, with the
/// namespace as its first part: `ui://clock/app.html` of namespace `up` is
/// `ui://up/clock/app.html`.
///
/// ```
/// use kberg_server::aggregate::{namespaced_uri, upstream_uri};
/// assert_eq!(namespaced_uri("fs", "file:///tmp/a.txt"), "fs+file:///tmp/a.txt");
/// assert_eq!(namespaced_uri("up", "ui://clock/app.html"), "ui://up/clock/app.html");
/// let back = upstream_uri("up", "ui://up/clock/app.html");
/// assert_eq!(back.as_deref(), Some("ui://clock/app.html"));
/// ```
pub fn namespaced_uri(namespace: &str, uri: &str) -> String {
    match uri.strip_prefix(UI_SCHEME) {
        Some(rest) => format!("{UI_SCHEME}{namespace}/{rest}"),
        None => format!("{namespace}+{uri}"),
    }
}

/// The upstream URI inside a namespaced one ([`namespaced_uri`]), if `uri` is
/// `<namespace>+<something>` or `ui://<namespace>/<something>`.
pub fn upstream_uri<'a>(namespace: &str, uri: &'a str) -> Option<Cow<'a, str>> {
    if let Some(rest) = uri.strip_prefix(UI_SCHEME) {
        return rest
            .strip_prefix(namespace)?
            .strip_prefix('/')
            .filter(|rest| !rest.is_empty())
            .map(|rest| Cow::Owned(format!("{UI_SCHEME}{rest}")));
    }
    // A view has one namespaced form, the `ui://` one.
    uri.strip_prefix(namespace)?
        .strip_prefix('+')
        .filter(|rest| !rest.is_empty() && !rest.starts_with(UI_SCHEME))
        .map(Cow::Borrowed)
}

/// Resource forwarding puts the namespace in front of a URI scheme, so it must be a valid
/// scheme start: an ASCII letter, then letters, digits, `+`, `-` or `.` (RFC 3986, section 3.1).
pub(super) fn check_scheme_namespace(ns: &str) -> Result<(), ConfigError> {
    let mut bytes = ns.bytes();
    let ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::InvalidNamespace {
            namespace: ns.to_string(),
            reason: "resources are forwarded as `<namespace>+<uri>`, so the namespace must start \
                     with a letter and use only letters, digits, `-` and `.`"
                .to_string(),
        })
    }
}

/// Reads a forwarded resource (or an expanded forwarded template) from its upstream.
pub(super) struct ForwardedReader {
    pub(super) up: Arc<Upstream>,
}

#[async_trait]
impl ResourceReader for ForwardedReader {
    async fn read(
        &self,
        uri: &str,
        _vars: &TemplateVars,
    ) -> Result<Vec<ResourceContents>, ResourceError> {
        let ns = self.up.namespace();
        let Some(remote) = upstream_uri(ns, uri) else {
            return Err(ResourceError::NotFound {
                uri: uri.to_string(),
            });
        };
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(
            ReadResourceRequestParams::new(remote.into_owned()),
        ));
        let failed = |message: String| ResourceError::ReadFailed {
            uri: uri.to_string(),
            message,
        };
        match forward(&self.up, request, None).await {
            Ok(ServerResult::ReadResourceResult(r)) => {
                let v = serde_json::to_value(&r).unwrap_or(Value::Null);
                contents_of(ns, &v).ok_or_else(|| {
                    failed(
                        UpstreamError::InvalidResult {
                            namespace: ns.to_string(),
                            expected: "readable resource contents",
                            found:
                                "contents without a `uri`, or with neither `text` nor base64 `blob`"
                                    .into(),
                        }
                        .coded_message(),
                    )
                })
            }
            Ok(other) => Err(failed(
                UpstreamError::InvalidResult {
                    namespace: ns.to_string(),
                    expected: "resource contents",
                    found: result_kind(&self.up, &other),
                }
                .coded_message(),
            )),
            Err(UpstreamError::Refused { code, .. })
                if code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND.0 =>
            {
                Err(ResourceError::NotFound {
                    uri: uri.to_string(),
                })
            }
            Err(e) => Err(failed(e.coded_message())),
        }
    }
}

/// The contents of a `resources/read` result, their URIs namespaced; `None` when an entry is
/// not the documented shape (no `uri`, neither `text` nor base64 `blob`). Read with
/// kberg-core's one codec for resource contents.
fn contents_of(ns: &str, result: &Value) -> Option<Vec<ResourceContents>> {
    let entries = result.get("contents")?.as_array()?;
    entries
        .iter()
        .map(|c| {
            let mut contents = ResourceContents::deserialize(c).ok()?;
            contents.uri = namespaced_uri(ns, &contents.uri);
            Some(contents)
        })
        .collect()
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// An entry's `_meta` as it came (an MCP App's view has its content security policy there).
fn meta(v: &Value) -> serde_json::Map<String, Value> {
    v.get("_meta")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn descriptor_of(ns: &str, v: &Value) -> Option<ResourceDescriptor> {
    let uri = v.get("uri")?.as_str().filter(|u| !u.is_empty())?;
    let name = text(v, "name").unwrap_or_else(|| uri.to_string());
    let mut d = ResourceDescriptor::new(namespaced_uri(ns, uri), name);
    d.title = text(v, "title");
    d.description = text(v, "description");
    d.mime_type = text(v, "mimeType");
    d.size = v.get("size").and_then(Value::as_u64);
    d.meta = meta(v);
    d.icons = Icon::read_all(v.get("icons"));
    Some(d)
}

fn template_of(ns: &str, v: &Value) -> Option<ResourceTemplate> {
    let t = v.get("uriTemplate")?.as_str().filter(|u| !u.is_empty())?;
    let name = text(v, "name").unwrap_or_else(|| t.to_string());
    let mut template = ResourceTemplate::new(namespaced_uri(ns, t), name);
    template.title = text(v, "title");
    template.description = text(v, "description");
    template.mime_type = text(v, "mimeType");
    template.meta = meta(v);
    template.icons = Icon::read_all(v.get("icons"));
    Some(template)
}

/// Reads the upstream's resources and templates (every page) when it offers resources, and
/// makes the registry match: unchanged entries stay registered (a concurrent read never finds
/// one missing), changed resources are replaced in place (their subscriptions survive), gone
/// ones are removed. Entries that cannot be registered are skipped, logged and reported by
/// [`Aggregator::skipped_resources`](super::Aggregator::skipped_resources). A failure to list
/// is logged and leaves the previous entries in place.
pub(super) async fn sync_resources(
    resources: &ResourceRegistry,
    up: &Arc<Upstream>,
    peer: &Peer<RoleClient>,
) {
    let ns = up.namespace();
    let offers = peer
        .peer_info()
        .is_some_and(|i| i.capabilities.resources.is_some());
    let (listed, listed_templates) = if offers {
        let listed = match super::pages::resources(peer).await {
            Ok(r) => r,
            Err(e) => {
                // An upstream's error may quote the credential it was sent.
                let error = quoted(up, &e.to_string());
                tracing::warn!(namespace = ns, ?error, "listing resources failed");
                return;
            }
        };
        let templates = match super::pages::templates(peer).await {
            Ok(t) => t,
            Err(e) => {
                let error = quoted(up, &e.to_string());
                tracing::warn!(namespace = ns, ?error, "listing resource templates failed");
                return;
            }
        };
        (listed, templates)
    } else {
        (Vec::new(), Vec::new())
    };
    let mut skipped = Vec::new();
    let mut wanted = BTreeMap::new();
    for r in &listed {
        let v = serde_json::to_value(r).unwrap_or(Value::Null);
        match descriptor_of(ns, &v) {
            Some(d) => {
                wanted.insert(d.uri.clone(), d);
            }
            None => skipped.push((v.to_string(), "it has no URI".to_string())),
        }
    }
    let mut wanted_templates = BTreeMap::new();
    for t in &listed_templates {
        let v = serde_json::to_value(t).unwrap_or(Value::Null);
        match template_of(ns, &v) {
            Some(t) => {
                wanted_templates.insert(t.uri_template.clone(), t);
            }
            None => skipped.push((v.to_string(), "it has no URI template".to_string())),
        }
    }

    let reader: Arc<dyn ResourceReader> = Arc::new(ForwardedReader { up: up.clone() });
    let mut registered = up
        .registered_resources
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    let mut templates = up
        .registered_templates
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    // Resources and templates in one edit: a listing never shows part of the change, and
    // clients hear of one change.
    let Ok(()) = resources.edit(|e| {
        registered.retain(|uri, _| {
            let keep = wanted.contains_key(uri);
            if !keep {
                e.remove(uri);
            }
            keep
        });
        for (uri, d) in wanted {
            match registered.get(&uri) {
                Some(old) if *old == d => {}
                Some(_) => match e.register_or_replace(d.clone(), reader.clone()) {
                    Ok(_) => {
                        registered.insert(uri, d);
                    }
                    Err(err) => {
                        registered.remove(&uri);
                        skipped.push((uri, err.to_string()));
                    }
                },
                None => match e.register(d.clone(), reader.clone()) {
                    Ok(()) => {
                        registered.insert(uri, d);
                    }
                    Err(err) => {
                        let reason = match err {
                            CoreError::Duplicate { .. } => {
                                format!("`{uri}` is already taken by another resource")
                            }
                            other => other.to_string(),
                        };
                        skipped.push((uri, reason));
                    }
                },
            }
        }
        templates.retain(|t, old| {
            let keep = wanted_templates.get(t) == Some(old);
            if !keep {
                e.remove_template(t);
            }
            keep
        });
        for (t, template) in wanted_templates {
            if templates.contains_key(&t) {
                continue;
            }
            match e.register_template(template.clone(), reader.clone()) {
                Ok(()) => {
                    templates.insert(t, template);
                }
                Err(err) => {
                    let reason = match err {
                        CoreError::Duplicate { .. } => {
                            format!("`{t}` is already taken by another template")
                        }
                        other => other.to_string(),
                    };
                    skipped.push((t, reason));
                }
            }
        }
        Ok::<(), std::convert::Infallible>(())
    });
    // Reported (logged, and to the app) in the upstream's own words (a URI, an entry without
    // one, the reason quoting it): redacted and cut as its messages are.
    let skipped: Vec<(String, String)> = skipped
        .into_iter()
        .map(|(what, reason)| (quoted(up, &what), quoted(up, &reason)))
        .collect();
    for (what, reason) in &skipped {
        tracing::warn!(namespace = ns, resource = ?what, ?reason, "upstream resource skipped");
    }
    if let Ok(mut r) = up.registered_resources.lock() {
        *r = registered;
    }
    if let Ok(mut r) = up.registered_templates.lock() {
        *r = templates;
    }
    if let Ok(mut s) = up.skipped_resources.lock() {
        *s = skipped;
    }
}

/// Makes the upstream's subscriptions match the registry's interest: one `resources/subscribe`
/// per upstream URI whose namespaced URI has a subscriber, one `resources/unsubscribe` when the
/// last one leaves, all sent at once. Only when the upstream advertises `resources.subscribe`.
/// A refused or timed-out subscribe is logged; answers whether every wanted subscription is
/// held (the caller tries again later when not). With `announce` (the first subscribing on a
/// new connection), each URI taken up is announced to its subscribers as updated: whatever
/// changed while no connection held it was never told.
#[allow(deprecated)]
pub(super) async fn sync_subscriptions(
    resources: &ResourceRegistry,
    up: &Upstream,
    peer: &Peer<RoleClient>,
    announce: bool,
) -> bool {
    let ns = up.namespace();
    let supports = peer.peer_info().is_some_and(|i| {
        i.capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false)
    });
    let wanted: BTreeSet<String> = if supports {
        resources
            .subscribed_uris()
            .iter()
            .filter_map(|u| upstream_uri(ns, u).map(Cow::into_owned))
            .collect()
    } else {
        BTreeSet::new()
    };
    let mut held = up
        .upstream_subscriptions
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    let gone: Vec<String> = held.difference(&wanted).cloned().collect();
    let unsubscribed = futures::future::join_all(gone.into_iter().map(|uri| async move {
        let request = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
            UnsubscribeRequestParams::new(uri.clone()),
        ));
        if let Err(e) = forward(up, request, None).await {
            tracing::warn!(namespace = ns, ?uri, error = ?e.coded_message(), "unsubscribing upstream failed");
        }
        uri
    }))
    .await;
    // Either way the subscription is no longer wanted; a late update reaches nobody.
    for uri in unsubscribed {
        held.remove(&uri);
    }
    let new: Vec<String> = wanted.difference(&held).cloned().collect();
    let subscribed = futures::future::join_all(new.into_iter().map(|uri| async move {
        let request = ClientRequest::SubscribeRequest(SubscribeRequest::new(
            SubscribeRequestParams::new(uri.clone()),
        ));
        match forward(up, request, None).await {
            Ok(_) => Some(uri),
            Err(e) => {
                tracing::warn!(namespace = ns, ?uri, error = ?e.coded_message(), "subscribing upstream failed");
                None
            }
        }
    }))
    .await;
    for uri in subscribed.into_iter().flatten() {
        if announce {
            resources.notify_updated(&namespaced_uri(ns, &uri));
        }
        held.insert(uri);
    }
    let all_held = wanted.is_subset(&held);
    if let Ok(mut s) = up.upstream_subscriptions.lock() {
        *s = held;
    }
    all_held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_uris_map_back() {
        assert_eq!(
            namespaced_uri("fs", "file:///tmp/a.txt"),
            "fs+file:///tmp/a.txt"
        );
        let back = |ns: &str, uri: &str| upstream_uri(ns, uri).map(Cow::into_owned);
        assert_eq!(
            back("fs", "fs+file:///tmp/a.txt").as_deref(),
            Some("file:///tmp/a.txt")
        );
        // An upstream URI that itself has a `+` scheme stays whole.
        assert_eq!(back("fs", "fs+ev+x://y").as_deref(), Some("ev+x://y"));
        assert_eq!(back("fs", "file:///tmp/a.txt"), None);
        assert_eq!(back("fs", "fsx+file:///a"), None);
        assert_eq!(back("fs", "fs+"), None);
        assert_eq!(back("fs", "f+s+file:///a"), None);
        // A view keeps its scheme; the namespace is its first part, and only a whole one.
        assert_eq!(namespaced_uri("up", "ui://a/b.html"), "ui://up/a/b.html");
        assert_eq!(namespaced_uri("up", "ui://{name}"), "ui://up/{name}");
        assert_eq!(
            back("up", "ui://up/a/b.html").as_deref(),
            Some("ui://a/b.html")
        );
        for foreign in [
            "ui://upx/a",
            "ui://u/p/a",
            "ui://up/",
            "ui://up",
            "up+ui://a",
            "ui:/up/a",
        ] {
            assert_eq!(back("up", foreign), None, "{foreign}");
        }
        assert_eq!(back("up.b", "ui://up/a"), None);
    }

    #[test]
    fn scheme_namespaces() {
        assert!(check_scheme_namespace("fs").is_ok());
        assert!(check_scheme_namespace("a-b.c2").is_ok());
        for bad in ["2fs", "f_s", "", "-a", ".a"] {
            assert_eq!(
                check_scheme_namespace(bad).map_err(|e| e.code()),
                Err("invalid_namespace"),
                "{bad}"
            );
        }
    }

    #[test]
    fn contents_are_namespaced_and_checked() {
        let v = serde_json::json!({"contents": [
            {"uri": "x://a", "mimeType": "text/plain", "text": "hi"},
            {"uri": "x://b", "blob": "aGk="},
        ]});
        let c = contents_of("ns", &v).expect("valid");
        assert_eq!(
            c[0],
            ResourceContents::text("ns+x://a", Some("text/plain"), "hi")
        );
        assert_eq!(
            c[1],
            ResourceContents::blob("ns+x://b", None, b"hi".to_vec())
        );
        for bad in [
            serde_json::json!({"contents": 5}),
            serde_json::json!({"contents": [{"text": "no uri"}]}),
            serde_json::json!({"contents": [{"uri": "x://a"}]}),
            serde_json::json!({"contents": [{"uri": "x://a", "blob": "not base64!"}]}),
        ] {
            assert!(contents_of("ns", &bad).is_none(), "{bad}");
        }
    }
}
