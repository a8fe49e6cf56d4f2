//! The supervisor of one upstream: connect, list, serve, reconnect with backoff.
//!
//! The supervisor task owns the rmcp client. It connects (a child process over stdio, or a
//! Streamable HTTP endpoint), lists the upstream's tools (and prompts and resources, when
//! forwarded) into the registries, publishes the connection for forwarded calls to borrow, then
//! waits for it to end: the child exits, a call saw the transport fail, the shutdown token
//! fires. Then it reconnects after the configured exponential backoff. A list-change
//! notification re-lists on the live connection; subscription interest changes are relayed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::ServiceExt;
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::closing::UpstreamHttp;
use super::config::UpstreamTransport;
use super::error::ConnectError;
use super::forward::quoted;
use super::front::{Aggregation, Upstream, UpstreamStatus};
use super::order::Ordered;
use super::relay::UpstreamClient;
use super::resources::sync_subscriptions;
use super::tools::sync_tools;

pub(super) type Client = rmcp::service::RunningService<RoleClient, UpstreamClient>;

async fn connect(up: &Arc<Upstream>) -> Result<(Client, Option<u32>), ConnectError> {
    let handler = UpstreamClient { up: up.clone() };
    match &up.config.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            inherit_env,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args);
            if let Some(names) = inherit_env {
                // Inheriting is what `Command` does by default; this narrows it, reading the
                // aggregator's environment only to hand the named variables on unchanged.
                cmd.env_clear();
                for name in names {
                    if let Some(value) = std::env::var_os(name) {
                        cmd.env(name, value);
                    }
                }
            }
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(up.config.stderr.stdio())
                .spawn()
                .map_err(|e| ConnectError::Spawn {
                    command: command.clone(),
                    message: up.redactions.text(&e.to_string()).into_owned(),
                })?;
            if let Some(stderr) = stderr {
                tokio::spawn(super::stderr::drain(
                    up.config.namespace.clone(),
                    stderr,
                    up.redactions.clone(),
                ));
            }
            let pid = transport.id();
            let client = handler
                .serve(Ordered::new(transport, up.relay_order.clone()))
                .await
                .map_err(|e| ConnectError::Initialize {
                    target: command.clone(),
                    message: up.redactions.text(&e.to_string()).into_owned(),
                })?;
            Ok((client, pid))
        }
        UpstreamTransport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (k, v) in headers {
                // Checked when the aggregator starts; a header that slipped through (a
                // credential with a line break) fails the connection rather than being left
                // out, which would make the call unauthenticated.
                match (
                    axum::http::HeaderName::try_from(k.as_str()),
                    axum::http::HeaderValue::try_from(v.as_str()),
                ) {
                    (Ok(k), Ok(v)) => {
                        custom.insert(k, v);
                    }
                    _ => return Err(ConnectError::InvalidHeader(k.chars().take(64).collect())),
                }
            }
            let names: Arc<[axum::http::HeaderName]> = custom.keys().cloned().collect();
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
            // The session's `DELETE` goes with the headers the app names once the credential
            // changed (see `closing`).
            let client = UpstreamHttp {
                inner: http_client()?,
                configured: names,
                closing: up.closing.clone(),
            };
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let client = handler
                .serve(Ordered::new(transport, up.relay_order.clone()))
                .await
                // Neither the URL's credentials nor a header's value (an upstream may echo
                // the token in its error body) reach the reason, which callers are shown.
                .map_err(|e| ConnectError::Initialize {
                    target: up.config.transport.shown_target(),
                    message: up.redactions.text(&e.to_string()).into_owned(),
                })?;
            Ok((client, None))
        }
    }
}

/// The HTTP client for one upstream connection. rmcp's default client opens a new TCP connection
/// for every request (it turns pooling off to dodge a delayed-ACK stall); measured here that
/// tripled the aggregator's cost per forwarded call. This client keeps connections alive and
/// sends with `TCP_NODELAY`, which avoids that stall at its cause (Nagle's algorithm waiting for
/// the peer's delayed ACK). Redirects are not followed: the requests carry the upstream's
/// credentials, which must never reach another endpoint.
fn http_client() -> Result<reqwest::Client, ConnectError> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ConnectError::HttpClient(e.to_string()))
}

/// One upstream's supervisor: connects, lists, serves the connection until it ends, and
/// reconnects after the configured exponential [`Backoff`](super::Backoff) delay.
pub(super) async fn supervise(
    shared: Arc<Aggregation>,
    up: Arc<Upstream>,
    shutdown: CancellationToken,
) {
    let mut attempt: u32 = 0;
    let mut delays = shared.backoff.delays();
    let mut generation: u64 = 0;
    loop {
        let connected = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(shared.connect_timeout, connect(&up)) => r
                .unwrap_or(Err(ConnectError::Timeout(shared.connect_timeout))),
        };
        let reason = match connected {
            Err(e) => e.to_string(),
            Ok((client, pid)) => {
                let peer = client.peer().clone();
                let listed =
                    tokio::time::timeout(shared.connect_timeout, sync_tools(&shared, &up, &peer))
                        .await;
                match listed {
                    Err(_) => {
                        let _ = client.cancel().await;
                        format!(
                            "it did not list its tools (and prompts and resources, when forwarded) within {:?}",
                            shared.connect_timeout
                        )
                    }
                    Ok(Err(e)) => {
                        let _ = client.cancel().await;
                        // The upstream wrote this error and may quote the credential it was
                        // sent (a rejected token): redacted below, with every other reason.
                        format!("listing its tools failed: {e}")
                    }
                    Ok(Ok(())) => {
                        attempt = 0;
                        delays = shared.backoff.delays();
                        generation += 1;
                        if let Ok(mut p) = up.pid.lock() {
                            *p = pid;
                        }
                        up.set_peer(Some((peer.clone(), generation)));
                        up.status
                            .send_replace(UpstreamStatus::Connected { generation });
                        tracing::info!(
                            namespace = up.namespace(),
                            generation,
                            "upstream connected"
                        );
                        let reason =
                            run_connected(&shared, &up, client, &peer, generation, &shutdown).await;
                        up.set_peer(None);
                        // Whatever the gone connection held upstream ended with it.
                        if let Ok(mut s) = up.upstream_subscriptions.lock() {
                            s.clear();
                        }
                        if let Ok(mut p) = up.pid.lock() {
                            *p = None;
                        }
                        match reason {
                            Some(r) => r,
                            None => {
                                up.status.send_replace(UpstreamStatus::Unavailable {
                                    reason: "the aggregator is shutting down".into(),
                                });
                                return;
                            }
                        }
                    }
                }
            }
        };
        // Callers are shown the reason (a refusal, an operator's status page) and the log keeps
        // it: whichever path produced it, no credential of the transport stays in it, and it is
        // cut short, since nothing but the upstream bounds how long its error is.
        let reason = quoted(&up, &reason);
        tracing::warn!(
            namespace = up.namespace(),
            ?reason,
            attempt,
            "upstream unavailable"
        );
        up.status
            .send_replace(UpstreamStatus::Unavailable { reason });
        let delay = delays.next().unwrap_or(shared.backoff.max);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// Serves one connection until it ends. `None` means shutdown; otherwise why it ended.
async fn run_connected(
    shared: &Aggregation,
    up: &Arc<Upstream>,
    client: Client,
    peer: &Peer<RoleClient>,
    generation: u64,
    shutdown: &CancellationToken,
) -> Option<String> {
    let stop = client.cancellation_token();
    let waiting = client.waiting();
    tokio::pin!(waiting);
    let mut stop = Some(stop);
    // A new connection holds no upstream subscriptions yet: take up what is still subscribed.
    if let Ok(mut s) = up.upstream_subscriptions.lock() {
        s.clear();
    }
    let mut interest = shared.resources.as_ref().map(|r| {
        let mut rx = r.subscription_changes();
        rx.mark_changed();
        rx
    });
    // The first subscribing on a connection announces an update of every URI it takes up: what
    // changed while no connection held it was never told.
    let mut first_sync = true;
    // Subscribes that failed are tried again, later and later, until they hold.
    let mut retry: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let mut retry_delay = SUBSCRIBE_RETRY_FIRST;
    loop {
        let sync_now = tokio::select! {
            _ = &mut waiting => return Some("the connection ended".to_string()),
            () = interest_changed(&mut interest) => true,
            () = retry_due(&mut retry) => true,
            () = shutdown.cancelled() => {
                if let Some(s) = stop.take() { s.cancel(); }
                let _ = (&mut waiting).await;
                return None;
            }
            () = up.broken.notified() => {
                if up.broken_generation.load(Ordering::Acquire) != generation {
                    // About a connection that is already gone.
                    continue;
                }
                if let Some(s) = stop.take() { s.cancel(); }
                let _ = (&mut waiting).await;
                return Some("a request to it failed on the transport".to_string());
            }
            () = up.relist.notified() => {
                match tokio::time::timeout(shared.connect_timeout, sync_tools(shared, up, peer)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        let error = quoted(up, &e.to_string());
                        tracing::warn!(namespace = up.namespace(), ?error, "re-listing tools failed");
                    }
                    Err(_) => {
                        if let Some(s) = stop.take() { s.cancel(); }
                        let _ = (&mut waiting).await;
                        return Some("it did not answer its list requests in time".to_string());
                    }
                }
                false
            }
        };
        if !sync_now {
            continue;
        }
        let Some(resources) = &shared.resources else {
            continue;
        };
        // Subscribing waits for the upstream's answers (at most its call timeout each, all at
        // once): neither shutdown nor the connection's end waits for it.
        let held = tokio::select! {
            held = sync_subscriptions(resources, up, peer, first_sync) => held,
            _ = &mut waiting => return Some("the connection ended".to_string()),
            () = shutdown.cancelled() => {
                if let Some(s) = stop.take() { s.cancel(); }
                let _ = (&mut waiting).await;
                return None;
            }
        };
        first_sync = false;
        if held {
            retry = None;
            retry_delay = SUBSCRIBE_RETRY_FIRST;
        } else {
            retry = Some(Box::pin(tokio::time::sleep(retry_delay)));
            retry_delay = (retry_delay * 2).min(SUBSCRIBE_RETRY_MAX);
        }
    }
}

/// How soon a failed upstream subscribe is tried again, and the longest wait between tries.
const SUBSCRIBE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const SUBSCRIBE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// Resolves when the retry timer runs out; never without one.
async fn retry_due(retry: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>) {
    match retry {
        Some(sleep) => {
            sleep.as_mut().await;
            *retry = None;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Resolves when the registry's subscription interest changed; never when resources are not
/// forwarded.
async fn interest_changed(rx: &mut Option<watch::Receiver<u64>>) {
    let open = match rx {
        Some(r) => r.changed().await.is_ok(),
        None => false,
    };
    if !open {
        std::future::pending::<()>().await;
    }
}
