//! The third-party Gitea MCP server (`gitea-mcp` 0.5.1, pinned and installed by
//! `scripts/install-tools.sh`) against the Gitea REST stand-in (`tests/support/gitea_standin`),
//! as a stdio child reached through Kberg's aggregator the way the gateway reaches it. Checked:
//! its tools and their annotations (which are reads), read and write tools answered from the
//! stand-in's data, the token from its environment on every request it makes (and nothing at
//! start), two children with two tokens acting as two people, and a wrong token, a missing issue
//! and invalid input answered with clear errors. The stand-in's own wire (auth forms, errors,
//! paging) is checked over plain HTTP first, so a peer failure is not a stand-in failure.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kberg_core::{
    CallOptions, Caller, Content, Grants, Principal, ToolOutput, ToolRegistry, WriteCapability,
};
use kberg_server::aggregate::{Aggregator, AggregatorConfig, UpstreamConfig};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use support::gitea_mcp;
use support::gitea_standin::{Credential, GITEA_VERSION, GiteaStandIn};

/// How long a test waits for anything that should happen (never a timing assertion).
const WAIT: Duration = Duration::from_secs(60);

const ALICE: &str = "7d3f0c2a9b1e4d5f8a6c0b2e4f6a8c1d3e5f7a9b";
const BOB: &str = "0b9a8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b";

/// The tools `gitea-mcp` 0.5.1 marks `readOnlyHint: true`.
const READS: [&str; 12] = [
    "get_issue",
    "get_pull_request",
    "get_server_info",
    "get_server_version",
    "list_branches",
    "list_issues",
    "list_labels",
    "list_milestones",
    "list_pull_requests",
    "list_releases",
    "list_repos",
    "read_file",
];

/// The ones it marks `readOnlyHint: false`.
const WRITES: [&str; 9] = [
    "add_comment",
    "add_comment_on_pr",
    "commit_changes",
    "create_branch",
    "create_issue",
    "create_pr",
    "create_release",
    "merge_pr",
    "update_issue",
];

fn gitea_write() -> WriteCapability {
    WriteCapability::new("gitea.write", "Change issues, branches, files and releases")
}

/// An aggregator with one `gitea-mcp` child per `(namespace, token)`, its write tools gated by
/// `gitea.write`, every child connected.
async fn aggregator(gitea: &GiteaStandIn, children: &[(&str, &str)]) -> (Aggregator, ToolRegistry) {
    let mut config = AggregatorConfig::new();
    for (ns, token) in children {
        config = config.upstream(UpstreamConfig::new(
            *ns,
            gitea_mcp::stdio(&gitea.url(), token),
        ));
        for w in WRITES {
            config = config.write_rule(format!("{ns}__{w}"), gitea_write());
        }
    }
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(config, registry.clone()).expect("valid aggregator config");
    for (ns, _) in children {
        assert!(
            agg.wait_connected(ns, 1, WAIT).await,
            "gitea-mcp ({ns}) did not connect: {:?}",
            agg.status(ns)
        );
    }
    (agg, registry)
}

fn agent() -> Caller {
    Caller::new(Principal::new("agent").with_grants(Grants::of(["gitea.write"])))
}

async fn call(reg: &ToolRegistry, name: &str, args: Value) -> ToolOutput {
    reg.call(&agent(), name, args, CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{name} refused: {e}"))
}

fn text_of(out: &ToolOutput) -> String {
    out.content
        .iter()
        .filter_map(|c| match c {
            Content::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A successful call's JSON result (FastMCP sends it as the text block).
async fn ok(reg: &ToolRegistry, name: &str, args: Value) -> Value {
    let out = call(reg, name, args).await;
    let text = text_of(&out);
    assert!(!out.is_error, "{name} failed: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} answered non-JSON ({e}): {text}"))
}

/// A failed call's error text.
async fn err(reg: &ToolRegistry, name: &str, args: Value) -> String {
    let out = call(reg, name, args).await;
    let text = text_of(&out);
    assert!(out.is_error, "{name} should have failed, answered: {text}");
    text
}

fn widgets(extra: Value) -> Value {
    let mut args = json!({"owner": "acme", "repo": "widgets"});
    if let (Some(a), Some(e)) = (args.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    args
}

/// Every recorded request carried `token` in `Authorization: token ...` and acted as `login`.
fn all_carry(requests: &[support::gitea_standin::RecordedRequest], token: &str, login: &str) {
    assert!(!requests.is_empty(), "no request reached the stand-in");
    for r in requests {
        assert_eq!(
            r.credential,
            Credential::TokenHeader(token.to_owned()),
            "{} {} carried the wrong credential",
            r.method,
            r.path
        );
        assert_eq!(r.login.as_deref(), Some(login), "{} {}", r.method, r.path);
    }
}

// ---- the stand-in's own wire ------------------------------------------------------------------

async fn get(url: &str, auth: Option<&str>) -> (u16, reqwest::header::HeaderMap, Value) {
    let client = reqwest::Client::new();
    let mut req = client.get(url);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = req.send().await.expect("stand-in answers");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.expect("body");
    let json = serde_json::from_str(&body).unwrap_or(Value::Null);
    (status, headers, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_reads_gitea_credential_forms_and_answers_gitea_errors() {
    let gitea = GiteaStandIn::start([(ALICE, "alice"), (BOB, "bob")]).await;
    let base = gitea.url();
    let user = format!("{base}/api/v1/user");

    let (s, _, b) = get(&user, Some(&format!("token {ALICE}"))).await;
    assert_eq!((s, b["login"].as_str()), (200, Some("alice")));
    let (s, _, b) = get(&user, Some(&format!("Bearer {BOB}"))).await;
    assert_eq!((s, b["login"].as_str()), (200, Some("bob")));
    let (s, h, b) = get(&format!("{user}?access_token={BOB}"), None).await;
    assert_eq!((s, b["login"].as_str()), (200, Some("bob")));
    assert!(
        h.contains_key("x-gitea-warning"),
        "query tokens are deprecated"
    );

    // Missing: Gitea's `token is required`; a scheme Gitea does not read is no credential.
    for auth in [None, Some("Basic YWxpY2U6cHc=")] {
        let (s, _, b) = get(&user, auth).await;
        assert_eq!(s, 401);
        assert_eq!(b["message"], "token is required");
        assert_eq!(b["url"], format!("{base}/api/swagger"));
    }
    // Wrong: 401 on every route, even the public one, quoting the value back as Gitea 1.2x does.
    for path in [
        "/api/v1/user",
        "/api/v1/version",
        "/api/v1/repos/acme/widgets",
    ] {
        let (s, _, b) = get(&format!("{base}{path}"), Some("token wrong-token")).await;
        assert_eq!(s, 401, "{path}");
        assert_eq!(
            b["message"],
            "access token does not exist [sha: wrong-token]"
        );
    }
    // Anonymous: the version is public, the private repositories are not there.
    let (s, _, b) = get(&format!("{base}/api/v1/version"), None).await;
    assert_eq!((s, b["version"].as_str()), (200, Some(GITEA_VERSION)));
    let (s, _, b) = get(&format!("{base}/api/v1/repos/acme/widgets"), None).await;
    assert_eq!(s, 404);
    assert_eq!(b["message"], "The target couldn't be found.");
    // bob is no member of alice's repository.
    let (s, _, _) = get(
        &format!("{base}/api/v1/repos/alice/notes"),
        Some(&format!("token {BOB}")),
    )
    .await;
    assert_eq!(s, 404);

    // Paging: limit 1 of the three issues (two issues and a pull request, state=all).
    let (s, h, b) = get(
        &format!("{base}/api/v1/repos/acme/widgets/issues?state=all&limit=1&page=2"),
        Some(&format!("token {ALICE}")),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(b.as_array().map(Vec::len), Some(1));
    assert_eq!(h["x-total-count"], "3");
    let link = h["link"].to_str().expect("link header");
    for rel in ["next", "last", "first", "prev"] {
        assert!(link.contains(&format!("rel=\"{rel}\"")), "{link}");
    }
    assert!(link.contains("page=3"), "{link}");

    // The log: method, path, credential form, who.
    let log = gitea.requests();
    assert_eq!(log[0].credential, Credential::TokenHeader(ALICE.into()));
    assert_eq!(log[1].credential, Credential::BearerHeader(BOB.into()));
    assert_eq!(log[2].credential, Credential::QueryAccessToken(BOB.into()));
    assert_eq!(log[3].credential, Credential::None);
    assert_eq!(log[4].authorization.as_deref(), Some("Basic YWxpY2U6cHc="));
    assert!(log.iter().all(|r| r.method == "GET"));
    assert_eq!(
        log.last().map(|r| r.path.as_str()),
        Some("/api/v1/repos/acme/widgets/issues")
    );
}

// ---- gitea-mcp against it ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_with_annotations_and_nothing_reaches_gitea_at_start() {
    let gitea = GiteaStandIn::start([(ALICE, "alice")]).await;
    let transport =
        TokioChildProcess::new(gitea_mcp::command(&gitea.url(), ALICE)).expect("start gitea-mcp");
    let client = tokio::time::timeout(WAIT, ().serve(transport))
        .await
        .expect("gitea-mcp initializes in time")
        .expect("gitea-mcp initializes");
    let tools = client.list_all_tools().await.expect("tools/list");

    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for t in &tools {
        let a = t
            .annotations
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no annotations", t.name));
        let read_only = a
            .read_only_hint
            .unwrap_or_else(|| panic!("{} does not say whether it is read-only", t.name));
        tracing::info!(
            tool = %t.name,
            read_only,
            destructive = ?a.destructive_hint,
            idempotent = ?a.idempotent_hint,
            open_world = ?a.open_world_hint,
            "gitea-mcp tool"
        );
        if read_only {
            reads.push(t.name.to_string());
        } else {
            writes.push(t.name.to_string());
        }
    }
    reads.sort();
    writes.sort();
    eprintln!("gitea-mcp read-only tools: {}", reads.join(", "));
    eprintln!("gitea-mcp write tools:     {}", writes.join(", "));
    assert_eq!(reads, READS);
    assert_eq!(writes, WRITES);
    assert!(
        gitea.requests().is_empty(),
        "gitea-mcp called Gitea while starting: {:?}",
        gitea.requests()
    );
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_tools_work_and_carry_the_token_on_every_request() {
    let gitea = GiteaStandIn::start([(ALICE, "alice")]).await;
    let (agg, reg) = aggregator(&gitea, &[("gitea", ALICE)]).await;

    // The aggregator keeps the upstream's annotations on the namespaced tools.
    for (names, read_only) in [(&READS[..], true), (&WRITES[..], false)] {
        for name in names {
            let spec = reg
                .spec(&format!("gitea__{name}"))
                .unwrap_or_else(|| panic!("gitea__{name} is not registered"));
            assert_eq!(spec.hints.read_only_hint, Some(read_only), "{name}");
        }
    }

    let info = ok(&reg, "gitea__get_server_info", json!({})).await;
    assert_eq!(info["gitea_user"], "alice");
    assert_eq!(info["gitea_version"], GITEA_VERSION);
    assert_eq!(info["gitea_url"], gitea.url());

    let repos = ok(&reg, "gitea__list_repos", json!({})).await;
    let names: Vec<&str> = repos
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["full_name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["acme/widgets", "alice/notes"]);
    let org = ok(&reg, "gitea__list_repos", json!({"owner": "acme"})).await;
    assert_eq!(org[0]["full_name"], "acme/widgets");
    assert_eq!(org[0]["object_format_name"], "sha256");

    let open = ok(&reg, "gitea__list_issues", widgets(json!({}))).await;
    assert_eq!(
        open.as_array().map(Vec::len),
        Some(1),
        "the pull request is no issue: {open}"
    );
    assert_eq!(open[0]["title"], "Crash on an empty config");
    assert_eq!(open[0]["labels"][0]["name"], "bug");

    let issue = ok(
        &reg,
        "gitea__get_issue",
        widgets(json!({"issue_number": 1})),
    )
    .await;
    assert_eq!(issue["milestone"]["title"], "v1.0");
    assert_eq!(issue["comments"], 1);
    assert_eq!(issue["comments_list"][0]["user"]["login"], "bob");

    let pulls = ok(&reg, "gitea__list_pull_requests", widgets(json!({}))).await;
    assert_eq!(pulls[0]["number"], 2);
    let pull = ok(
        &reg,
        "gitea__get_pull_request",
        widgets(json!({"pull_number": 2})),
    )
    .await;
    assert_eq!(pull["head"]["ref"], "feature/retry");
    assert_eq!(pull["base"]["ref"], "main");
    assert_eq!(pull["comments_list"][0]["body"], "Looks good to me.");

    let file = ok(
        &reg,
        "gitea__read_file",
        widgets(json!({"path": "README.md"})),
    )
    .await;
    assert_eq!(file["text"], "# widgets\n\nWidgets for every workshop.\n");
    let on_branch = ok(
        &reg,
        "gitea__read_file",
        widgets(json!({"path": "src/retry.rs", "ref": "feature/retry"})),
    )
    .await;
    assert_eq!(on_branch["text"], "pub const ATTEMPTS: u32 = 3;\n");

    let branches = ok(&reg, "gitea__list_branches", widgets(json!({}))).await;
    let branch_names: Vec<&str> = branches
        .as_array()
        .map(|a| a.iter().filter_map(|b| b["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(branch_names, ["feature/retry", "main"]);
    assert_eq!(
        ok(&reg, "gitea__list_labels", widgets(json!({}))).await[1]["name"],
        "enhancement"
    );
    assert_eq!(
        ok(&reg, "gitea__list_milestones", widgets(json!({}))).await[0]["title"],
        "v1.0"
    );
    assert_eq!(
        ok(&reg, "gitea__list_releases", widgets(json!({}))).await[0]["tag_name"],
        "v0.1.0"
    );

    // Writes: an issue with a label by name (gitea-mcp resolves it through the labels list), then a
    // comment on it.
    let created = ok(
        &reg,
        "gitea__create_issue",
        widgets(
            json!({"title": "Widgets rust in the rain", "body": "Seen twice.", "labels": ["bug"]}),
        ),
    )
    .await;
    assert_eq!(created["number"], 4);
    assert_eq!(created["user"]["login"], "alice");
    assert_eq!(created["labels"][0]["name"], "bug");
    let comment = ok(
        &reg,
        "gitea__add_comment",
        widgets(json!({"issue_number": 4, "body": "Also on main."})),
    )
    .await;
    assert_eq!(comment["user"]["login"], "alice");
    gitea.inspect(|db| {
        let i = db
            .issues
            .iter()
            .find(|i| i.number == 4)
            .expect("issue 4 stored");
        assert_eq!(
            (i.poster.as_str(), i.title.as_str()),
            ("alice", "Widgets rust in the rain")
        );
        assert!(
            db.comments
                .iter()
                .any(|c| c.issue_number == 4 && c.poster == "alice")
        );
    });
    let open = ok(&reg, "gitea__list_issues", widgets(json!({}))).await;
    assert_eq!(open[0]["number"], 4, "newest first");

    let requests = gitea.requests();
    all_carry(&requests, ALICE, "alice");
    let paths: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    for want in [
        "GET /api/v1/user",
        "GET /api/v1/version",
        "GET /api/v1/user/repos",
        "GET /api/v1/users/acme/repos",
        "GET /api/v1/repos/acme/widgets/issues",
        "GET /api/v1/repos/acme/widgets/issues/1",
        "GET /api/v1/repos/acme/widgets/issues/1/comments",
        "GET /api/v1/repos/acme/widgets/pulls",
        "GET /api/v1/repos/acme/widgets/pulls/2",
        "GET /api/v1/repos/acme/widgets/contents/README.md",
        "GET /api/v1/repos/acme/widgets/branches",
        "GET /api/v1/repos/acme/widgets/labels",
        "GET /api/v1/repos/acme/widgets/milestones",
        "GET /api/v1/repos/acme/widgets/releases",
        "POST /api/v1/repos/acme/widgets/issues",
        "POST /api/v1/repos/acme/widgets/issues/4/comments",
    ] {
        assert!(
            paths.iter().any(|p| p == want),
            "{want} was never requested: {paths:#?}"
        );
    }
    assert!(requests.iter().all(|r| r.status < 300), "{requests:#?}");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_children_with_two_tokens_act_as_two_people() {
    let gitea = GiteaStandIn::start([(ALICE, "alice"), (BOB, "bob")]).await;
    let (agg, reg) = aggregator(&gitea, &[("alice", ALICE), ("bob", BOB)]).await;
    gitea.take_requests();

    let mut posters = BTreeMap::new();
    for (ns, token, login) in [
        ("alice", ALICE, "alice"),
        ("bob", BOB, "bob"),
        ("alice", ALICE, "alice"),
    ] {
        let info = ok(&reg, &format!("{ns}__get_server_info"), json!({})).await;
        assert_eq!(info["gitea_user"], login);
        let created = ok(
            &reg,
            &format!("{ns}__create_issue"),
            widgets(json!({"title": format!("filed by {login}")})),
        )
        .await;
        posters.insert(created["number"].as_i64().unwrap_or_default(), login);
        // Every request since the last check came from this child, with its own token.
        all_carry(&gitea.take_requests(), token, login);
    }
    assert_eq!(posters.len(), 3);
    gitea.inspect(|db| {
        for (number, login) in &posters {
            let i = db
                .issues
                .iter()
                .find(|i| i.number == *number)
                .expect("stored");
            assert_eq!(i.poster, *login, "issue {number}");
        }
    });

    // What each may see differs: alice's own repository is not bob's to list.
    let of = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r["full_name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        of(&ok(&reg, "alice__list_repos", json!({})).await),
        ["acme/widgets", "alice/notes"]
    );
    assert_eq!(
        of(&ok(&reg, "bob__list_repos", json!({})).await),
        ["acme/widgets"]
    );
    let hidden = err(
        &reg,
        "bob__read_file",
        json!({"owner": "alice", "repo": "notes", "path": "todo.md"}),
    )
    .await;
    assert!(hidden.contains("404"), "{hidden}");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_a_clear_error_and_changes_nothing() {
    const WRONG: &str = "ffffffffffffffffffffffffffffffffffffffff";
    let gitea = GiteaStandIn::start([(ALICE, "alice")]).await;
    let (agg, reg) = aggregator(&gitea, &[("gitea", WRONG)]).await;

    let e = err(&reg, "gitea__get_server_info", json!({})).await;
    assert!(e.contains("401"), "{e}");
    assert!(e.contains("access token does not exist"), "{e}");
    // Gitea quotes a rejected token back and gitea-mcp relays the body as it came: whatever sits
    // between it and an agent must scrub upstream errors of the credential it injected.
    assert!(e.contains(WRONG), "the echo this stand-in reproduces: {e}");

    let e = err(
        &reg,
        "gitea__create_issue",
        widgets(json!({"title": "never filed"})),
    )
    .await;
    assert!(e.contains("401"), "{e}");
    gitea.inspect(|db| assert!(db.issues.iter().all(|i| i.title != "never filed")));
    let requests = gitea.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.status == 401 && r.login.is_none())
    );
    assert!(
        requests
            .iter()
            .all(|r| r.credential == Credential::TokenHeader(WRONG.into()))
    );
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_objects_and_bad_input_are_clear_errors() {
    let gitea = GiteaStandIn::start([(ALICE, "alice")]).await;
    let (agg, reg) = aggregator(&gitea, &[("gitea", ALICE)]).await;

    let e = err(
        &reg,
        "gitea__get_issue",
        widgets(json!({"issue_number": 999})),
    )
    .await;
    assert!(
        e.contains("404") && e.contains("The target couldn't be found."),
        "{e}"
    );
    let e = err(
        &reg,
        "gitea__read_file",
        widgets(json!({"path": "no/such.file"})),
    )
    .await;
    assert!(e.contains("404"), "{e}");
    let e = err(
        &reg,
        "gitea__list_issues",
        json!({"owner": "acme", "repo": "gadgets"}),
    )
    .await;
    assert!(e.contains("404"), "{e}");
    // An unknown label: gitea-mcp's own check, listing the valid ones; nothing is created.
    let e = err(
        &reg,
        "gitea__create_issue",
        widgets(json!({"title": "x", "labels": ["wontfix"]})),
    )
    .await;
    assert!(e.contains("wontfix") && e.contains("enhancement"), "{e}");
    // An empty title reaches Gitea, which refuses it the way its binding does.
    let e = err(&reg, "gitea__create_issue", widgets(json!({"title": ""}))).await;
    assert!(e.contains("422") && e.contains("[Title]: Required"), "{e}");
    // A branch that exists already.
    let e = err(
        &reg,
        "gitea__create_branch",
        widgets(json!({"new_branch_name": "main"})),
    )
    .await;
    assert!(e.contains("409"), "{e}");
    gitea.inspect(|db| assert_eq!(db.issues.len(), 3, "nothing was created"));
    all_carry(&gitea.requests(), ALICE, "alice");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_branch_file_pull_request_workflow_writes_through() {
    let gitea = GiteaStandIn::start([(ALICE, "alice")]).await;
    let (agg, reg) = aggregator(&gitea, &[("gitea", ALICE)]).await;

    let b = ok(
        &reg,
        "gitea__create_branch",
        widgets(json!({"new_branch_name": "fix/rain"})),
    )
    .await;
    assert_eq!(b["name"], "fix/rain");
    // A new file (POST after a 404 lookup), then an update of it (PUT with the looked-up sha).
    for content in ["first\n", "second\n"] {
        let f = ok(
            &reg,
            "gitea__commit_changes",
            widgets(json!({"branch": "fix/rain", "path": "docs/rain.md", "content": content, "message": "Rain notes"})),
        )
        .await;
        assert_eq!(f["content"]["path"], "docs/rain.md");
        assert_eq!(f["commit"]["author"]["username"], "alice");
    }
    let file = ok(
        &reg,
        "gitea__read_file",
        widgets(json!({"path": "docs/rain.md", "ref": "fix/rain"})),
    )
    .await;
    assert_eq!(file["text"], "second\n");
    let pr = ok(
        &reg,
        "gitea__create_pr",
        widgets(json!({"head": "fix/rain", "base": "main", "title": "Rain notes"})),
    )
    .await;
    assert_eq!(pr["number"], 4);
    assert_eq!(pr["user"]["login"], "alice");
    let issue = ok(
        &reg,
        "gitea__update_issue",
        widgets(json!({"issue_number": 1, "state": "closed", "labels": ["enhancement"]})),
    )
    .await;
    assert_eq!(issue["state"], "closed");
    assert_eq!(issue["labels"][0]["name"], "enhancement");
    let rel = ok(
        &reg,
        "gitea__create_release",
        widgets(
            json!({"tag_name": "v0.2.0", "name": "Second preview", "target_commitish": "fix/rain"}),
        ),
    )
    .await;
    assert_eq!(rel["author"]["login"], "alice");

    // Gitea answers a merge with 200 and an empty body (its swagger's `empty`); gitea-mcp 0.5.1
    // expects a JSON object there, so the merge happens and the tool still reports an error.
    let e = err(&reg, "gitea__merge_pr", widgets(json!({"pull_number": 4}))).await;
    assert!(e.contains("expected a JSON object"), "{e}");
    gitea.inspect(|db| {
        let pr = db
            .issues
            .iter()
            .find(|i| i.number == 4)
            .and_then(|i| i.pull.clone());
        assert!(pr.is_some_and(|p| p.merged_by.as_deref() == Some("alice")));
    });
    let merged = ok(
        &reg,
        "gitea__read_file",
        widgets(json!({"path": "docs/rain.md"})),
    )
    .await;
    assert_eq!(merged["text"], "second\n");

    let requests = gitea.requests();
    all_carry(&requests, ALICE, "alice");
    let methods: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    for want in [
        "POST /api/v1/repos/acme/widgets/branches 201",
        "GET /api/v1/repos/acme/widgets/contents/docs/rain.md 404",
        "POST /api/v1/repos/acme/widgets/contents/docs/rain.md 201",
        "PUT /api/v1/repos/acme/widgets/contents/docs/rain.md 200",
        "POST /api/v1/repos/acme/widgets/pulls 201",
        "PATCH /api/v1/repos/acme/widgets/issues/1 201",
        "PUT /api/v1/repos/acme/widgets/issues/1/labels 200",
        "POST /api/v1/repos/acme/widgets/releases 201",
        "POST /api/v1/repos/acme/widgets/pulls/4/merge 200",
    ] {
        assert!(
            methods.iter().any(|m| m == want),
            "{want} missing: {methods:#?}"
        );
    }
    agg.shutdown().await;
}

/// Runs `gitea-mcp` with `token` (and `extra` environment) with its stderr captured, makes one
/// call that Gitea refuses, stops it, and returns everything it wrote on stderr.
async fn stderr_of_a_refused_call(token: &str, extra: &[(&str, &str)]) -> String {
    use tokio::io::AsyncReadExt as _;
    let gitea = GiteaStandIn::start([(ALICE, "alice")]).await;
    let mut cmd = gitea_mcp::command(&gitea.url(), token);
    cmd.envs(extra.iter().copied());
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start gitea-mcp");
    let mut stderr = stderr.expect("piped stderr");
    let reader = tokio::spawn(async move {
        let mut all = String::new();
        let _ = stderr.read_to_string(&mut all).await;
        all
    });
    let client = tokio::time::timeout(WAIT, ().serve(transport))
        .await
        .expect("gitea-mcp initializes in time")
        .expect("gitea-mcp initializes");
    let out = client
        .call_tool(rmcp::model::CallToolRequestParams::new("get_server_info"))
        .await
        .expect("tools/call answered");
    assert_eq!(out.is_error, Some(true));
    assert_eq!(gitea.requests().len(), 1);
    let _ = client.cancel().await;
    tokio::time::timeout(WAIT, reader)
        .await
        .expect("stderr closes when gitea-mcp exits")
        .expect("stderr reader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_reaches_the_childs_stderr_unless_its_log_level_is_critical() {
    const WRONG: &str = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";
    // FastMCP logs a failed tool call with its exception, which quotes Gitea's body, which quotes
    // the rejected token: a child's stderr is as sensitive as its answers.
    // (Its log renderer wraps at the terminal width, 80 columns without one; a wide one keeps the
    // token on one line so the check cannot miss it.)
    let noisy =
        stderr_of_a_refused_call(WRONG, &[("COLUMNS", "1000"), ("FASTMCP_LOG_LEVEL", "INFO")])
            .await;
    assert!(noisy.contains(WRONG), "stderr was: {noisy}");
    let quiet = stderr_of_a_refused_call(
        WRONG,
        &[("COLUMNS", "1000"), ("FASTMCP_LOG_LEVEL", "CRITICAL")],
    )
    .await;
    assert!(!quiet.contains(WRONG), "stderr was: {quiet}");
}
