//! Several `bridle serve` processes on one PostgreSQL database, as a team runs them behind one
//! address: each replica its own data directory, all naming the same `database:`, master key
//! file and admin credential file (`bridle_support/replica_dirs.rs`), in front of them a
//! loopback proxy that sends each request to the next replica in turn (`bridle_support/proxy.rs`),
//! and the official Python SDK (`mcp==2.3.0`, `clients/bridle_replicas_client.py`) as the agent,
//! on the stateless 2026-07-28 revision it negotiates through the proxy.
//!
//! - Through the proxy the agent lists tools and proposes guardrails; one replica is killed with
//!   SIGKILL mid-traffic; the agent's next calls succeed on the other (the proxy skips the dead
//!   one), and every proposal the agent saw accepted is in the review queue exactly once.
//! - Both replicas' admin APIs approve one proposal at the same moment (a barrier): exactly one
//!   answers 200, the other 409 `already_decided`, and the audit log holds one approval.
//! - An approval made on replica A's admin API reaches the agent listening to its rules on B.
//! - The same agent on the 2025-11-25 handshake: its one session is resumed by B from the
//!   database (every other request lands there), survives A, where it was initialized, killed
//!   with SIGKILL, and is never resumed or served for another agent's token.
//!
//! The cluster is the throwaway one the bridle-rules and bridle-gateway tests start (`initdb` and
//! `pg_ctl` on a free loopback port; `scripts/install-tools.sh` installs Debian's `postgresql`),
//! one database per test. Needs `scripts/install-tools.sh` (or `KBERG_TOOLS_DIR`) for the SDK.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod bridle_support;
#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;
#[path = "bridle_support/proxy.rs"]
mod proxy;
#[path = "bridle_support/replica_dirs.rs"]
mod replica_dirs;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use bridle_support::{Reaped, Server, client_script, expect_line, lines_of, python};
use kberg_testkit::eventually_async;
use pg_cluster::{PASSWORD, PgCluster};
use proxy::RoundRobinProxy;
use replica_dirs::{ADMIN_TOKEN, AGENT_TOKEN, OTHER_TOKEN, PROJECT, ReplicaDirs};
use serde_json::Value;

/// The rules resource of the demo project for a claude agent.
const RULES_URI: &str = "bridle://rules/demo/claude";

/// One `bridle serve` replica: its MCP address and its admin API.
struct Replica {
    server: Server,
    addr: SocketAddr,
    admin: String,
}

impl Replica {
    /// Starts `bridle serve` on `dir` and waits until its `/readyz` answers 200.
    fn start(rt: &tokio::runtime::Runtime, dir: &Path) -> Replica {
        let server = Server::start(dir);
        let admin = server.printed_line("bridle: admin API on ");
        let addr = server
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .unwrap();
        let replica = Replica {
            server,
            addr,
            admin,
        };
        let ready = format!("http://{addr}/readyz");
        rt.block_on(async {
            let http = reqwest::Client::new();
            eventually_async(&format!("{ready} to answer 200"), || async {
                let r = http.get(&ready).send().await.ok()?;
                (r.status() == reqwest::StatusCode::OK).then_some(())
            })
            .await
        });
        replica
    }

    /// A GET of the admin API (`path` after `/admin/api/v1`) that must answer 200.
    fn get(&self, rt: &tokio::runtime::Runtime, path: &str) -> Value {
        let url = format!("{}{path}", self.admin);
        rt.block_on(async {
            let r = reqwest::Client::new()
                .get(&url)
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), reqwest::StatusCode::OK, "GET {url}");
            r.json().await.unwrap()
        })
    }
}

/// Both replicas of a test, started one after the other (the first imports the project).
fn two_replicas(rt: &tokio::runtime::Runtime) -> (ReplicaDirs, Replica, Replica) {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let dirs = ReplicaDirs::lay_out(2, &cluster.url(&dbname), PASSWORD);
    let a = Replica::start(rt, dirs.dir(0));
    let b = Replica::start(rt, dirs.dir(1));
    (dirs, a, b)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The Python agent in `mode` against `url`, its stdin piped (the traffic mode waits on it).
fn agent(mode: &str, url: &str, arg: &str, pause_at: Option<usize>) -> Reaped {
    let mut cmd = Command::new(python());
    cmd.arg(client_script("bridle_replicas_client.py")).args([
        mode,
        url,
        AGENT_TOKEN,
        PROJECT,
        arg,
    ]);
    if let Some(k) = pause_at {
        cmd.arg(k.to_string());
    }
    Reaped(
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

/// One proposal's outcome as the agent saw it.
#[derive(Debug, PartialEq)]
enum Seen {
    Accepted(u64),
    Failed(String),
}

/// Reads the traffic mode's `ACCEPTED i id` / `FAILED i why` lines up to the line starting with
/// `until` (returned), adding each to `seen`.
fn read_outcomes(
    lines: &std::sync::mpsc::Receiver<String>,
    until: &str,
    seen: &mut BTreeMap<usize, Seen>,
) -> String {
    loop {
        let line = expect_line(lines, "");
        if line.starts_with(until) {
            return line;
        }
        let mut parts = line.splitn(3, ' ');
        let (kind, i, rest) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
        let outcome = match kind {
            Some("ACCEPTED") => Seen::Accepted(rest.trim().parse().unwrap()),
            Some("FAILED") => Seen::Failed(rest.to_string()),
            _ => continue,
        };
        let i: usize = i.unwrap().parse().unwrap();
        assert!(seen.insert(i, outcome).is_none(), "call {i} reported twice");
    }
}

/// The guardrail id a queued proposal adds.
fn guardrail_of(item: &Value) -> Option<&str> {
    if item["change"]["kind"] == "guardrail" {
        item["change"]["id"].as_str()
    } else {
        None
    }
}

#[test]
fn the_python_agent_works_through_the_proxy_and_survives_a_replica_killed_mid_traffic() {
    const CALLS: usize = 30;
    const PAUSE_AT: usize = 9;
    let rt = runtime();
    let (_dirs, mut a, b) = two_replicas(&rt);
    let proxy = rt
        .block_on(RoundRobinProxy::start(vec![a.addr, b.addr]))
        .unwrap();

    let mut client = agent(
        "traffic",
        &proxy.url("/mcp"),
        &CALLS.to_string(),
        Some(PAUSE_AT),
    );
    let lines = lines_of(&mut client.0);
    let connected = expect_line(&lines, "connected ");
    assert_eq!(connected, "connected 2026-07-28");
    expect_line(&lines, "ok list-tools ");
    let mut seen = BTreeMap::new();
    read_outcomes(&lines, "PAUSED", &mut seen);
    assert_eq!(seen.len(), PAUSE_AT + 1);
    assert!(
        seen.values().all(|s| matches!(s, Seen::Accepted(_))),
        "{seen:?}"
    );
    // Requests alternated: both replicas answered a share of them.
    let before = proxy.forwarded();
    assert!(before.iter().all(|&n| n >= 3), "{before:?}");
    assert_eq!(proxy.skipped(), [0, 0]);

    // The agent goes on, and replica A is killed under it (SIGKILL: no shutdown at all).
    writeln!(client.0.stdin.as_mut().unwrap(), "go").unwrap();
    a.server.kill_now();
    read_outcomes(&lines, "ok list-tools-after", &mut seen);
    let status = client.0.wait().unwrap();
    assert!(status.success(), "the agent failed: {status}");

    // Every call was answered; at most the one in flight at the kill lost its answer (a 502
    // from the proxy: it cannot know whether A committed it), and the proxy skipped the dead
    // replica for every later one, which B answered.
    assert_eq!(seen.len(), CALLS);
    let failed: Vec<_> = seen
        .iter()
        .filter(|(_, s)| matches!(s, Seen::Failed(_)))
        .collect();
    assert!(failed.len() <= 1, "{failed:?}");
    assert!(
        matches!(seen.get(&(CALLS - 1)), Some(Seen::Accepted(_))),
        "{seen:?}"
    );
    let skipped = proxy.skipped();
    assert!(
        skipped[0] >= 1,
        "the proxy never met the dead replica: {skipped:?}"
    );
    assert_eq!(skipped[1], 0);
    assert!(proxy.forwarded()[1] > before[1]);

    // The review queue (read on B, the survivor).
    each_accepted_proposal_once(&rt, &b, &seen);
    no_secret_logged(&[&a, &b]);
}

/// The review queue (read on `survivor`): each proposal the agent saw accepted exactly once,
/// under the id it was given; an unanswered one at most once; nothing else.
fn each_accepted_proposal_once(
    rt: &tokio::runtime::Runtime,
    survivor: &Replica,
    seen: &BTreeMap<usize, Seen>,
) {
    let queue = survivor.get(
        rt,
        &format!("/queue?status=all&project={PROJECT}&limit=500"),
    );
    let items = queue["items"].as_array().unwrap();
    let mut by_guardrail: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for item in items {
        assert_eq!(item["origin"]["proposed_by"], "claude", "{item}");
        assert_eq!(item["status"], "pending", "{item}");
        by_guardrail
            .entry(guardrail_of(item).unwrap())
            .or_default()
            .push(item["id"].as_u64().unwrap());
    }
    for (i, outcome) in seen {
        let ids = by_guardrail
            .remove(format!("replica-{i}").as_str())
            .unwrap_or_default();
        match outcome {
            Seen::Accepted(id) => assert_eq!(ids, [*id], "proposal {i}"),
            Seen::Failed(_) => assert!(ids.len() <= 1, "proposal {i}: {ids:?}"),
        }
    }
    assert!(
        by_guardrail.is_empty(),
        "unexpected proposals: {by_guardrail:?}"
    );
}

/// The status of a `tools/list` sent straight to `replica` in the 2025-11-25 session `sid`
/// with `token`.
fn in_session(rt: &tokio::runtime::Runtime, replica: &Replica, token: &str, sid: &str) -> u16 {
    rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/mcp", replica.addr))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

#[test]
fn a_2025_11_25_session_resumes_on_the_other_replica_for_its_owner_only() {
    const CALLS: usize = 16;
    const PAUSE_AT: usize = 5;
    let rt = runtime();
    let (_dirs, mut a, b) = two_replicas(&rt);
    let proxy = rt
        .block_on(RoundRobinProxy::start(vec![a.addr, b.addr]))
        .unwrap();

    // The handshake goes to A (the proxy's first upstream); from the next request on, every
    // other one reaches B, which resumes the session from the database.
    let mut client = agent(
        "legacy-traffic",
        &proxy.url("/mcp"),
        &CALLS.to_string(),
        Some(PAUSE_AT),
    );
    let lines = lines_of(&mut client.0);
    assert_eq!(expect_line(&lines, "connected "), "connected 2025-11-25");
    let sid = expect_line(&lines, "SESSION ")
        .trim_start_matches("SESSION ")
        .to_string();
    expect_line(&lines, "ok list-tools ");
    let mut seen = BTreeMap::new();
    read_outcomes(&lines, "PAUSED", &mut seen);
    assert!(
        seen.values().all(|s| matches!(s, Seen::Accepted(_))),
        "{seen:?}"
    );
    let before = proxy.forwarded();
    assert!(before.iter().all(|&n| n >= 3), "{before:?}");

    // Another agent naming the session is told it does not exist, on either replica: B does
    // not resume it for them, A (which created it) does not serve it to them.
    assert_eq!(in_session(&rt, &b, OTHER_TOKEN, &sid), 404);
    assert_eq!(in_session(&rt, &a, OTHER_TOKEN, &sid), 404);
    // Its owner still is served on both.
    assert_eq!(in_session(&rt, &b, AGENT_TOKEN, &sid), 200);
    assert_eq!(in_session(&rt, &a, AGENT_TOKEN, &sid), 200);

    // A, where it was initialized, is killed; the session goes on, on B alone.
    writeln!(client.0.stdin.as_mut().unwrap(), "go").unwrap();
    a.server.kill_now();
    read_outcomes(&lines, "ok list-tools-after", &mut seen);
    let status = client.0.wait().unwrap();
    assert!(status.success(), "the agent failed: {status}");
    assert_eq!(seen.len(), CALLS);
    let failed: Vec<_> = seen
        .iter()
        .filter(|(_, s)| matches!(s, Seen::Failed(_)))
        .collect();
    assert!(failed.len() <= 1, "{failed:?}");
    assert!(
        matches!(seen.get(&(CALLS - 1)), Some(Seen::Accepted(_))),
        "{seen:?}"
    );
    assert!(proxy.skipped()[0] >= 1, "{:?}", proxy.skipped());
    assert_eq!(in_session(&rt, &b, OTHER_TOKEN, &sid), 404);
    each_accepted_proposal_once(&rt, &b, &seen);
    no_secret_logged(&[&a, &b]);
}

/// The canary: neither replica's logs hold the agent's token, the admin credential or the
/// database password, whatever the traffic was (the kill included).
fn no_secret_logged(replicas: &[&Replica]) {
    for (n, r) in replicas.iter().enumerate() {
        let logged = r.server.logged();
        for (what, secret) in [
            ("the agent token", AGENT_TOKEN),
            ("the other agent's token", OTHER_TOKEN),
            ("the admin credential", ADMIN_TOKEN),
            ("the database password", PASSWORD),
        ] {
            assert!(!logged.contains(secret), "replica {n} logged {what}");
        }
    }
}

/// Approves proposal `id` on both replicas' admin APIs at the same moment; returns each
/// answer's status and body, A's first.
fn approve_on_both(
    rt: &tokio::runtime::Runtime,
    a: &Replica,
    b: &Replica,
    id: u64,
) -> [(u16, Value); 2] {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let http = reqwest::Client::new();
    let one = |admin: &str| {
        let url = format!("{admin}/queue/{id}/approve");
        let barrier = Arc::clone(&barrier);
        let http = http.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            let r = http
                .post(&url)
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        })
    };
    rt.block_on(async {
        let (x, y) = tokio::join!(one(&a.admin), one(&b.admin));
        [x.unwrap(), y.unwrap()]
    })
}

#[test]
fn concurrent_approvals_on_both_replicas_have_exactly_one_winner() {
    const ROUNDS: usize = 4;
    let rt = runtime();
    let (_dirs, a, b) = two_replicas(&rt);
    let proxy = rt
        .block_on(RoundRobinProxy::start(vec![a.addr, b.addr]))
        .unwrap();
    let mut client = agent("traffic", &proxy.url("/mcp"), &ROUNDS.to_string(), None);
    let lines = lines_of(&mut client.0);
    let mut seen = BTreeMap::new();
    read_outcomes(&lines, "ok list-tools-after", &mut seen);
    assert!(client.0.wait().unwrap().success());
    let ids: Vec<u64> = seen
        .values()
        .map(|s| match s {
            Seen::Accepted(id) => *id,
            Seen::Failed(why) => panic!("a proposal failed: {why}"),
        })
        .collect();
    assert_eq!(ids.len(), ROUNDS);

    let mut revisions = Vec::new();
    let mut winners = [0, 0];
    for &id in &ids {
        let answers = approve_on_both(&rt, &a, &b, id);
        let won: Vec<usize> = (0..2).filter(|&i| answers[i].0 == 200).collect();
        assert_eq!(won.len(), 1, "proposal {id}: {answers:?}");
        let (w, l) = (won[0], 1 - won[0]);
        winners[w] += 1;
        let (status, problem) = &answers[l];
        assert_eq!(*status, 409, "{problem}");
        assert_eq!(problem["code"], "already_decided", "{problem}");
        assert_eq!(answers[w].1["status"], "approved");
        revisions.push(answers[w].1["applied_revision"].as_u64().unwrap());
    }
    // Each approval made exactly one revision, in order, whichever replica won it.
    let first = revisions[0];
    assert_eq!(
        revisions,
        (first..first + ROUNDS as u64).collect::<Vec<_>>(),
        "winners per replica {winners:?}"
    );

    // One shared audit log: exactly one approval of each proposal, read on either replica.
    for replica in [&a, &b] {
        let audit = replica.get(&rt, "/audit?kind=approval&limit=500");
        let subjects: Vec<&str> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["subject"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = ids.iter().map(|id| format!("proposal #{id}")).collect();
        assert_eq!(subjects, expected);
    }
    // And the queue agrees: every proposal approved, once.
    let queue = b.get(&rt, &format!("/queue?status=approved&project={PROJECT}"));
    let approved: Vec<u64> = queue["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(approved, ids);
    no_secret_logged(&[&a, &b]);
}

#[test]
fn an_approval_on_replica_a_reaches_an_agent_listening_on_replica_b() {
    let rt = runtime();
    let (_dirs, a, b) = two_replicas(&rt);

    let mut proposer = agent("propose", &a.server.url, "seen-on-b", None);
    let lines = lines_of(&mut proposer.0);
    let id: u64 = expect_line(&lines, "PROPOSED ")
        .trim_start_matches("PROPOSED ")
        .parse()
        .unwrap();
    assert!(proposer.0.wait().unwrap().success());

    let mut listener = agent("listen", &b.server.url, "seen-on-b", None);
    let lines = lines_of(&mut listener.0);
    assert_eq!(expect_line(&lines, "connected "), "connected 2026-07-28");
    expect_line(&lines, "LISTENING");

    let approved = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{}/queue/{id}/approve", a.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(approved, reqwest::StatusCode::OK);
    assert_eq!(
        expect_line(&lines, "UPDATED "),
        format!("UPDATED {RULES_URI} shows")
    );
    assert!(listener.0.wait().unwrap().success());
}
