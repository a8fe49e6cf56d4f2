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
//! `/readyz` needs no token, and a readiness poller (or anyone) may ask it many times a second;
//! each probe of an HTTP upstream opens a connection to it, and the rules-store and vault checks
//! each take a thread of tokio's blocking pool, where the vault's real reads wait too. So these
//! checks run in rounds (`ProbeCache`): one round at a time, run by its own task so that a
//! request that goes away cannot leave its blocking work behind and start another; requests that
//! arrive while a round runs wait for it and share its results, and a finished round's results
//! are reused for `health.probe_cache_secs` (default 1 s). Whether the gateway is shutting down
//! and whether an upstream is connected are read fresh on every request.

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
    let RoundAnswer {
        stores,
        probes: mut probed,
    } = state
        .metrics
        .readiness_probes
        .checks(state, targets, fresh_for)
        .await;
    checks.extend(stores);
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

/// The last round of readiness checks (the rules store, the vault and the upstream probes),
/// shared by `/readyz` requests: one round at a time, whose results serve every request that
/// waited for it and, for a while after, later ones too.
#[derive(Debug, Default)]
pub(crate) struct ProbeCache {
    /// Held while a round runs (by the round's own task), so concurrent requests wait for it
    /// rather than check again.
    last: Arc<tokio::sync::Mutex<Option<ProbeRound>>>,
}

#[derive(Debug)]
struct ProbeRound {
    started: Instant,
    /// The `rules_store` and `vault` checks, in that order.
    stores: Vec<Check>,
    results: BTreeMap<ProbeTarget, Result<(), String>>,
}

/// What a round answers one request: the store checks, and each target's probe by namespace.
struct RoundAnswer {
    stores: Vec<Check>,
    probes: BTreeMap<String, Result<(), String>>,
}

impl ProbeRound {
    /// The answer for `targets`, when this round probed each of them.
    fn answer(&self, targets: &[ProbeTarget]) -> Option<RoundAnswer> {
        let probes = targets
            .iter()
            .map(|t| Some((t.0.clone(), self.results.get(t)?.clone())))
            .collect::<Option<BTreeMap<_, _>>>()?;
        Some(RoundAnswer {
            stores: self.stores.clone(),
            probes,
        })
    }
}

impl ProbeCache {
    /// The store checks and each target's probe result: from the last round when it started
    /// after this request asked (the request waited for it) or less than `fresh_for` ago and
    /// probed every target, else from a new round. A new round runs in its own task, which
    /// holds the lock until it has stored its results, so a request that goes away mid-round
    /// neither cancels it nor lets another round start beside it.
    async fn checks(
        &self,
        state: &Arc<OpsState>,
        targets: Vec<ProbeTarget>,
        fresh_for: Duration,
    ) -> RoundAnswer {
        let asked = Instant::now();
        let mut last = Arc::clone(&self.last).lock_owned().await;
        if let Some(round) = last.as_ref()
            && (round.started >= asked || round.started.elapsed() < fresh_for)
            && let Some(answer) = round.answer(&targets)
        {
            return answer;
        }
        let state = Arc::clone(state);
        let wanted = targets.clone();
        let job = tokio::spawn(async move {
            let started = Instant::now();
            let (stores, results) = tokio::join!(
                check_stores(&state),
                futures::future::join_all(targets.iter().map(|(_, url)| probe(url)))
            );
            let round = ProbeRound {
                started,
                stores,
                results: targets.iter().cloned().zip(results).collect(),
            };
            let answer = round.answer(&targets);
            *last = Some(round);
            answer
        });
        match job.await {
            Ok(Some(answer)) => answer,
            // The round probed exactly these targets, so it answers them; a round whose task
            // did not finish answers nothing.
            Ok(None) | Err(_) => RoundAnswer {
                stores: vec![
                    Check::fail("rules_store", "the rules store check did not finish"),
                    Check::fail("vault", "the vault check did not finish"),
                ],
                probes: wanted
                    .into_iter()
                    .map(|(ns, _)| (ns, Err("the probe did not finish".to_string())))
                    .collect(),
            },
        }
    }
}

/// Checks that the rules store and the vault's database answer, each on the blocking pool:
/// the `rules_store` and `vault` checks, in that order.
async fn check_stores(state: &OpsState) -> Vec<Check> {
    let ctx = Arc::clone(&state.ctx);
    let rules = match tokio::task::spawn_blocking(move || ctx.store.last_change_id()).await {
        Ok(Ok(_)) => Check::pass("rules_store"),
        Ok(Err(e)) => Check::fail(
            "rules_store",
            format!("the rules store does not answer: {e}"),
        ),
        Err(_) => Check::fail("rules_store", "the rules store check did not finish"),
    };
    let vault = Arc::clone(&state.vault);
    let vault = match tokio::task::spawn_blocking(move || vault.ping()).await {
        Ok(Ok(_)) => Check::pass("vault"),
        Ok(Err(e)) => Check::fail("vault", format!("the vault does not answer: {e}")),
        Err(_) => Check::fail("vault", "the vault check did not finish"),
    };
    tracing::debug!(
        rules_store = rules.ok,
        vault = vault.ok,
        "readiness: the rules store and the vault were checked"
    );
    vec![rules, vault]
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
