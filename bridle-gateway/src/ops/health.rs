//! Liveness and readiness: what `/healthz` and `/readyz` answer.
//!
//! Liveness says only that the process serves HTTP; an orchestrator restarts a gateway that
//! stops answering it. Readiness says whether the gateway can do its work now, and names what
//! is missing when it cannot: the rules store must answer, the vault's database must answer
//! (its master key was checked when it opened, so an open vault is an unlocked one), every
//! required upstream (each enabled one not listed in `health.optional_upstreams`) must be
//! connected (an HTTP one's port must also accept a connection now, since the aggregator learns
//! of a vanished HTTP server only when a call fails), and the gateway must not be shutting down. Reasons are the owners' own
//! operator-facing sentences, which never carry credentials: an upstream's comes from the pool's
//! report, redacted by the aggregator and scrubbed of the value the gateway injects, since the
//! upstream's own error (which `/readyz` shows to anyone) may quote it.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::OpsState;

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked: `rules_store`, `vault`, `upstream:<namespace>`, `shutdown`.
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// Why it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Check {
    fn pass(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ok: true,
            reason: None,
        }
    }

    fn fail(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ok: false,
            reason: Some(reason.into()),
        }
    }
}

/// The answer of `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// `ready` or `not_ready`.
    pub status: &'static str,
    /// The checks that failed (empty when ready).
    pub not_ready: Vec<Check>,
    /// Every check, in a fixed order.
    pub checks: Vec<Check>,
}

impl Readiness {
    /// Whether every check passed.
    pub fn is_ready(&self) -> bool {
        self.not_ready.is_empty()
    }
}

/// Runs every readiness check.
pub(crate) async fn readiness(state: &Arc<OpsState>) -> Readiness {
    let mut checks = Vec::new();
    if state.draining.is_cancelled() {
        checks.push(Check::fail(
            "shutdown",
            "the gateway is shutting down and takes no new work",
        ));
    } else {
        checks.push(Check::pass("shutdown"));
    }
    let ctx = Arc::clone(&state.ctx);
    checks.push(
        match tokio::task::spawn_blocking(move || ctx.store.last_change_id()).await {
            Ok(Ok(_)) => Check::pass("rules_store"),
            Ok(Err(e)) => Check::fail(
                "rules_store",
                format!("the rules store does not answer: {e}"),
            ),
            Err(_) => Check::fail("rules_store", "the rules store check did not finish"),
        },
    );
    let vault = Arc::clone(&state.vault);
    checks.push(
        match tokio::task::spawn_blocking(move || vault.action_counts()).await {
            Ok(Ok(_)) => Check::pass("vault"),
            Ok(Err(e)) => Check::fail("vault", format!("the vault does not answer: {e}")),
            Err(_) => Check::fail("vault", "the vault check did not finish"),
        },
    );
    let reports = state.upstreams.reports().await;
    let required: Vec<_> = reports
        .into_iter()
        .filter(|r| r.enabled && !state.optional_upstreams.contains(&r.namespace))
        .collect();
    let probes = required.iter().map(|r| {
        let url = state
            .upstreams
            .routes()
            .get(&r.namespace)
            .and_then(|route| route.section.http.as_ref().map(|h| h.url.clone()));
        async move {
            match url {
                Some(url) if r.connected => probe(&url).await,
                _ => Ok(()),
            }
        }
    });
    let probed = futures::future::join_all(probes).await;
    for (report, probed) in required.into_iter().zip(probed) {
        let name = format!("upstream:{}", report.namespace);
        checks.push(match (report.connected, probed) {
            (true, Ok(())) => Check::pass(name),
            (true, Err(why)) => Check::fail(name, format!("the upstream is not reachable: {why}")),
            (false, _) => {
                let why = report
                    .last_error
                    .unwrap_or_else(|| "not connected yet".to_string());
                Check::fail(name, format!("the upstream is not reachable: {why}"))
            }
        });
    }
    let not_ready: Vec<Check> = checks.iter().filter(|c| !c.ok).cloned().collect();
    Readiness {
        status: if not_ready.is_empty() {
            "ready"
        } else {
            "not_ready"
        },
        not_ready,
        checks,
    }
}

/// How long a readiness probe waits for an HTTP upstream's port.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether an HTTP upstream's host and port accept a connection now. The aggregator learns
/// that an HTTP upstream went away only when a call to it fails; readiness should know before
/// an agent's call does.
async fn probe(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("its URL does not parse: {e}"))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| "its URL has no host".to_string())?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| "its URL has no port".to_string())?;
    match tokio::time::timeout(
        PROBE_TIMEOUT,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("{host}:{port} refuses connections ({})", e.kind())),
        Err(_) => Err(format!(
            "{host}:{port} did not answer within {} s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}
