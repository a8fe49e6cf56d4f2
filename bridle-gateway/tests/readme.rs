//! The README's examples, compiled (and the audit log's run). The Kanboard, admin and panel
//! examples serve on fixed addresses or reach a Kanboard server, so they are type-checked and
//! not run; the other tests run what they do. Each is here verbatim (the last test checks that
//! it still is), inside a function that sets up what the README leaves out. Change an example
//! in both places.

// The README's examples print what they show.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kberg_core::ToolRegistry;

type Outcome = Result<(), Box<dyn std::error::Error>>;

/// Kanboard's tools on a registry, with the embedder's access table.
#[cfg(feature = "kanboard")]
#[allow(dead_code)]
#[rustfmt::skip]
fn kanboard_tools(tools: ToolRegistry) -> Outcome {
    use bridle_gateway::kanboard::{self, KanboardClient, KanboardTools, StaticAccess};
    let my_access = StaticAccess::new();
let client = KanboardClient::new("http://127.0.0.1:8080/jsonrpc.php".parse()?, Duration::from_secs(30))?;
kanboard::register(&tools, KanboardTools::new(client, Arc::new(my_access)))?;
    Ok(())
}

/// The gateway with its admin API.
#[allow(dead_code)]
#[rustfmt::skip]
async fn gateway_with_the_admin_api(
    data_dir: PathBuf,
    listen: std::net::SocketAddr,
    shutdown: std::future::Pending<()>,
) -> Outcome {
    use bridle_gateway::GatewayBuilder;
    use bridle_gateway::admin::AdminTokens;
    let config = bridle_gateway::config::GatewayConfig::load(&data_dir)?;
let admins = AdminTokens::from_file(&data_dir.join("admin-tokens"))?; // `name token` lines
let bound = GatewayBuilder::new(&data_dir, config)
    .admin("127.0.0.1:7879".parse()?, Arc::new(admins)) // loopback only
    .build().await?
    .bind(listen).await?;
println!("admin API at {}", bound.admin_url().unwrap_or_default());
bound.run(shutdown).await?; // stops the admin API (and its event streams) with the gateway
    Ok(())
}

/// The panel on an admin server of one's own.
#[cfg(feature = "panel")]
#[allow(dead_code)]
#[rustfmt::skip]
async fn panel_behind_a_proxy(
    gateway: bridle_gateway::Gateway,
    addr: std::net::SocketAddr,
    credentials: Arc<dyn bridle_gateway::admin::AdminCredentials>,
) -> Outcome {
    use bridle_gateway::admin::AdminServer;
    use bridle_gateway::panel::PanelConfig;
let state = gateway.admin_state(credentials)
    .watcher("auditor");                       // this admin may only look, in the API and the panel
let server = AdminServer::bind(addr, state).await?
    .panel(Some(PanelConfig::default()
        .base_path("/bridle/panel")            // behind a reverse proxy that keeps the prefix
        .behind_tls(true)                      // __Host- cookie with Secure
        .allow_origin("https://bridle.example") // the proxy's public origin
        .mcp_url("https://bridle.example/mcp"))); // named in the connect snippets
// or `panel::router(config, &admin_state)` to merge into your own router
    drop(server);
    Ok(())
}

#[rustfmt::skip]
#[test]
fn the_audit_log_records_verifies_and_answers_queries() -> Outcome {
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path();
    let ninety_days = Duration::from_secs(90 * 24 * 3600);
use std::sync::Arc;
use bridle_gateway::audit::{AuditConfig, AuditLog, AuditQuery, Change, Entry, Kind, Retention, Surface};

let log = AuditLog::open(
    AuditConfig::new(data_dir.join("audit.db"))
        .with_retention(Retention::keep_all().with_max_age(ninety_days).with_max_entries(1_000_000)),
)?;
let tools = ToolRegistry::builder().audit_sink(Arc::new(log.clone())).build(); // every gate call, off the call path
log.record(Entry::user("alice", Surface::Api, Kind::Approval) // a change: written now, or Err
    .project("demo").subject("proposal #12").change(Change::revisions("r7", "r8")))?;
let page = log.query(&AuditQuery::all().project("demo").kind(Kind::Approval))?;
assert!(log.verify()?.is_intact());
log.flush()?;                                                // at shutdown
    assert_eq!(page.entries.len(), 1);
    drop(tools);
    Ok(())
}

#[test]
fn the_readme_examples_are_the_ones_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../README.md"),
        include_str!("readme.rs"),
    );
}
