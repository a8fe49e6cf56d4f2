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
//!
//! `/readyz` needs no token, and a readiness poller may ask it many times a second; each probe
//! of an HTTP upstream opens a connection to it. So the probes run in rounds (`ProbeCache`):
//! requests that arrive while a round runs wait for it and share its results, and a finished
//! round's results are reused for `health.probe_cache_secs` (default 1 s). The other checks are
//! local and run on every request, and whether an upstream is connected is read fresh each time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

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
        match tokio::task::spawn_blocking(move || vault.ping()).await {
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
    // The connected HTTP upstreams, whose ports are probed.
    let targets: Vec<ProbeTarget> = required
        .iter()
        .filter(|r| r.connected)
        .filter_map(|r| {
            let route = state.upstreams.routes().get(&r.namespace)?;
            let url = route.section.http.as_ref()?.url.clone();
            Some((r.namespace.clone(), url))
        })
        .collect();
    let fresh_for = Duration::from_secs(state.ctx.config.health.probe_cache_secs);
    let mut probed = state
        .metrics
        .readiness_probes
        .probe_all(targets, fresh_for)
        .await;
    for report in required {
        let probed = probed.remove(&report.namespace).unwrap_or(Ok(()));
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

/// An upstream probed: its namespace and URL.
type ProbeTarget = (String, String);

/// The last round of upstream probes, shared by `/readyz` requests: one round at a time, whose
/// results serve every request that waited for it and, for a while after, later ones too.
#[derive(Debug, Default)]
pub(crate) struct ProbeCache {
    /// Held while a round runs, so concurrent requests wait for it rather than probe again.
    last: tokio::sync::Mutex<Option<ProbeRound>>,
}

#[derive(Debug)]
struct ProbeRound {
    started: Instant,
    results: BTreeMap<ProbeTarget, Result<(), String>>,
}

impl ProbeCache {
    /// Each target's probe result, by namespace: from the last round when it started after
    /// this request asked (the request waited for it) or less than `fresh_for` ago and probed
    /// every target, else from a new round.
    async fn probe_all(
        &self,
        targets: Vec<ProbeTarget>,
        fresh_for: Duration,
    ) -> BTreeMap<String, Result<(), String>> {
        if targets.is_empty() {
            return BTreeMap::new();
        }
        let asked = Instant::now();
        let mut last = self.last.lock().await;
        if let Some(round) = last.as_ref()
            && (round.started >= asked || round.started.elapsed() < fresh_for)
            && let Some(known) = targets
                .iter()
                .map(|t| Some((t.0.clone(), round.results.get(t)?.clone())))
                .collect::<Option<BTreeMap<_, _>>>()
        {
            return known;
        }
        let started = Instant::now();
        let results = futures::future::join_all(targets.iter().map(|(_, url)| probe(url))).await;
        let round = ProbeRound {
            started,
            results: targets.into_iter().zip(results).collect(),
        };
        let answer = round
            .results
            .iter()
            .map(|((ns, _), r)| (ns.clone(), r.clone()))
            .collect();
        *last = Some(round);
        answer
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
