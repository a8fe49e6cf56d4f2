//! Hostile input against every operation of the admin API, built from the OpenAPI document the
//! gateway serves, so a route added to the document is swept without a change here. With an admin's
//! credential, each operation gets: for a request body, text that is not JSON, JSON that does not
//! parse, JSON of the wrong top-level type, `{}`, every declared property of the wrong type,
//! integers out of range, names no resource may have in the properties that name things, an unknown
//! field (refused: every body denies unknown fields) and a body one byte over the limit; for each
//! path parameter, an unknown id or name, names with `..`, `.`, an encoded `/`, spaces, NUL,
//! unicode, invalid UTF-8 and 300 characters, negative, overflowing and non-numeric ids; for each
//! query and header parameter, values of the wrong type and out of range, and a query parameter
//! given twice. Every refusal is a 4xx (never a 5xx) RFC 9457 problem with a stable `code`, of a
//! status the document lists for the operation, and never repeats a secret value sent with it. A 2xx is right only for the few answers listed in
//! [`MAY_SUCCEED`], [`FREE_NAMES`] and [`FREE_TEXT_QUERIES`], and must be the answer to a `null`
//! body where the document allows one. Afterwards the gateway still answers `/healthz`, and its
//! agents, projects, secrets and patterns are as they were.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::{Events, json_ok};
use bridle_gateway::admin::page::MAX_LIMIT;
use bridle_gateway::admin::{BASE_PATH, DEFAULT_BODY_LIMIT};
use bridle_memory::{ConstantEmbedder, EmbeddedStore, MemoryService, PatternIndexConfig};
use bridle_rules::{ChangeRequest, Origin, Severity};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sent as a secret's value (and inside other garbage); no answer may repeat it.
const CANARY: &str = "sweep-canary-5f1c9e0d7a";

/// Answers that may be a 2xx, by `METHOD path` and case. Each is a body the operation
/// documents as acceptable, so success is the right answer, not a failure to validate.
const MAY_SUCCEED: &[(&str, &str)] = &[
    // Every field of an agent change is optional: `{}` changes nothing and answers the agent.
    ("PATCH /admin/api/v1/agents/{name}", "empty object"),
    // A rotation's body (its grace period) is optional: `{}` rotates with none.
    ("POST /admin/api/v1/agents/{name}/rotate", "empty object"),
    // A decision's note is optional: `{}` decides without one. Each route has a ticket of its
    // own, so the garbage before met a pending ticket; the `null` body sent just before `{}`
    // decided it already, so `{}` may be refused too.
    (
        "POST /admin/api/v1/scope-tickets/{id}/approve",
        "empty object",
    ),
    ("POST /admin/api/v1/scope-tickets/{id}/deny", "empty object"),
];

/// Query parameters that are free text or a filter by name: any value is a search or a filter
/// that may match nothing, so a 2xx (an empty page) is right. Every other parameter is checked,
/// and garbage in it must be refused.
const FREE_TEXT_QUERIES: &[&str] = &[
    "q",
    "project",
    "agent",
    "type",
    "actor",
    "kind",
    "session",
    "tag",
    "arch_tag",
    "proposed_by",
    "chunk_type",
    "file",
];

/// Body properties that name something (a resource, a type, a tag): each gets the names no
/// resource may have. Free text (descriptions, reasons, values, URLs, documents) takes any
/// string, so it is not among them.
const NAME_PROPERTIES: &[&str] = &[
    "name",
    "type",
    "reference_tag",
    "arch_tag",
    "project",
    "agent",
    "projects",
];

/// Body properties in [`NAME_PROPERTIES`] that take such names, by operation.
const FREE_NAMES: &[(&str, &str, Free)] = &[
    // A well-known pattern's name is a label in the document, documented as taking spaces and
    // `-_./+&()'`; each one taken would change the document, so none is sent.
    (
        "POST /admin/api/v1/projects/{project}/standard-patterns",
        "name",
        Free::NotSent,
    ),
    // A purge's fields are filters, as a listing's query is: one that matches nothing removes
    // nothing, and the answer says so (`removed: 0`).
    (
        "POST /admin/api/v1/memory/sessions/purge",
        "project",
        Free::MaySucceed,
    ),
    (
        "POST /admin/api/v1/memory/sessions/purge",
        "agent",
        Free::MaySucceed,
    ),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Free {
    NotSent,
    MaySucceed,
}

/// Names no resource may have, as a body carries them.
fn hostile_names() -> Vec<String> {
    [
        "",
        " ",
        ".",
        "..",
        "../../bridle.yaml",
        "a/b",
        "a\\b",
        "a b",
        "a\0b",
        "\u{e9}t\u{e9}-\u{1f980}",
        "-1",
    ]
    .map(String::from)
    .into_iter()
    .chain(std::iter::once("a".repeat(300)))
    .collect()
}

/// One operation of the document.
struct Operation {
    method: Method,
    /// The path template, with `{param}`s.
    template: String,
    params: Vec<Param>,
    body: Option<BodySchema>,
    /// The statuses the document lists for it.
    responses: Vec<String>,
}

impl Operation {
    fn name(&self) -> String {
        format!("{} {}", self.method, self.template)
    }
}

struct Param {
    name: String,
    /// `path`, `query` or `header`.
    location: String,
    schema: Value,
}

struct BodySchema {
    /// The object schema (`properties`, `required`).
    schema: Value,
    /// Whether the document allows `null` as the body.
    nullable: bool,
}

/// Follows a `$ref` into `components/schemas`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r
                .strip_prefix("#/components/schemas/")
                .expect("a local ref");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// The first non-null type a schema declares (`"string"`, `["integer", "null"]`...).
fn type_of(schema: &Value) -> Option<&str> {
    match &schema["type"] {
        Value::String(t) => Some(t.as_str()),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

fn operations(doc: &Value) -> Vec<Operation> {
    let mut ops = Vec::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let params = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| Param {
                            name: p["name"].as_str().unwrap().to_string(),
                            location: p["in"].as_str().unwrap().to_string(),
                            schema: resolve(doc, &p["schema"]).clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let body = op["requestBody"]["content"]
                .get("application/json")
                .map(|c| {
                    let schema = &c["schema"];
                    match schema["oneOf"].as_array() {
                        Some(alternatives) => BodySchema {
                            schema: alternatives
                                .iter()
                                .map(|a| resolve(doc, a))
                                .find(|a| type_of(a) != Some("null") && a["type"] != "null")
                                .expect("a non-null alternative")
                                .clone(),
                            nullable: alternatives.iter().any(|a| a["type"] == "null"),
                        },
                        None => BodySchema {
                            schema: resolve(doc, schema).clone(),
                            nullable: false,
                        },
                    }
                });
            let responses = op["responses"]
                .as_object()
                .map(|r| r.keys().cloned().collect())
                .unwrap_or_default();
            ops.push(Operation {
                method,
                template: template.clone(),
                params,
                body,
                responses,
            });
        }
    }
    ops
}

/// What the sweep's own resources are called.
struct Fixtures {
    proposal: u64,
    approve_ticket: u64,
    deny_ticket: u64,
    run: String,
}

const PATTERN: &str = "sweep-pattern";
const EXAMPLE: &str = "sweep-example";
const SECRET: &str = "sweep-secret";

impl Fixtures {
    /// A value of `param` that names something real in `template` (or a harmless name when
    /// nothing is at hand: a route added later still has its body and query swept).
    fn value(&self, template: &str, param: &str) -> String {
        let under = |prefix: &str| template.starts_with(&format!("{BASE_PATH}{prefix}"));
        match param {
            "project" => "demo".into(),
            "agent_type" => "claude".into(),
            "pattern" => PATTERN.into(),
            "tag" if under("/projects/") => EXAMPLE.into(),
            "name" if under("/agents/") => "bot".into(),
            "name" if under("/secrets/") => SECRET.into(),
            "version" => "1".into(),
            "id" if under("/queue/") => self.proposal.to_string(),
            "id" if template.ends_with("/deny") => self.deny_ticket.to_string(),
            "id" if under("/scope-tickets/") => self.approve_ticket.to_string(),
            "id" if under("/index-runs/") => self.run.clone(),
            _ => "sweep".into(),
        }
    }

    /// `template` with every parameter set to its fixture, but `hostile` (already encoded) for
    /// the one named.
    fn path(&self, op: &Operation, hostile: Option<(&str, &str)>) -> String {
        let mut path = op.template.clone();
        for p in op.params.iter().filter(|p| p.location == "path") {
            let value = match hostile {
                Some((name, v)) if name == p.name => v.to_string(),
                _ => self.value(&op.template, &p.name),
            };
            path = path.replace(&format!("{{{}}}", p.name), &value);
        }
        path
    }
}

/// A request as the sweep sends it.
struct Req {
    method: Method,
    /// From the server's root, already percent-encoded.
    path: String,
    content_type: Option<&'static str>,
    body: Option<Vec<u8>>,
    header: Option<(String, String)>,
    /// Sent over a plain socket, byte for byte: for paths a URL library would normalize (`..`).
    raw: bool,
}

impl Req {
    fn new(method: Method, path: String) -> Self {
        Self {
            method,
            path,
            content_type: None,
            body: None,
            header: None,
            raw: false,
        }
    }

    fn json(mut self, body: &Value) -> Self {
        self.content_type = Some("application/json");
        self.body = Some(serde_json::to_vec(body).unwrap());
        self
    }

    fn bytes(mut self, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        self.content_type = Some(content_type);
        self.body = Some(body.into());
        self
    }
}

struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

struct Sweep<'a> {
    gw: &'a Gw,
    /// `http://127.0.0.1:<port>`.
    root: String,
    sent: usize,
    /// How many answers had each status and code, for the summary.
    tally: BTreeMap<String, usize>,
    failures: Vec<String>,
}

impl Sweep<'_> {
    async fn send(&mut self, req: &Req) -> Answer {
        self.sent += 1;
        // A deadline so a request that hangs fails the test instead of stalling it.
        tokio::time::timeout(Duration::from_secs(60), async {
            if req.raw {
                self.send_raw(req).await
            } else {
                let mut r = self
                    .gw
                    .http
                    .request(req.method.clone(), format!("{}{}", self.root, req.path))
                    .bearer_auth(admin_support::ALICE);
                if let Some(ct) = req.content_type {
                    r = r.header("content-type", ct);
                }
                if let Some(body) = &req.body {
                    r = r.body(body.clone());
                }
                if let Some((k, v)) = &req.header {
                    r = r.header(k.as_str(), v.as_str());
                }
                let resp = r.send().await.unwrap();
                Answer {
                    status: resp.status().as_u16(),
                    content_type: resp
                        .headers()
                        .get("content-type")
                        .map(|v| v.to_str().unwrap_or("?").to_string())
                        .unwrap_or_default(),
                    body: resp.bytes().await.unwrap().to_vec(),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} {} answers", req.method, req.path))
    }

    async fn send_raw(&self, req: &Req) -> Answer {
        let addr = self.root.strip_prefix("http://").unwrap();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = req.body.clone().unwrap_or_default();
        let mut head = format!(
            "{} {} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\nconnection: close\r\ncontent-length: {}\r\n",
            req.method,
            req.path,
            admin_support::ALICE,
            body.len()
        );
        if let Some(ct) = req.content_type {
            head.push_str(&format!("content-type: {ct}\r\n"));
        }
        head.push_str("\r\n");
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(&body).await.unwrap();
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await.unwrap();
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head");
        let head = String::from_utf8_lossy(&answer[..split]).to_string();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        Answer {
            status,
            content_type,
            body: answer[split + 4..].to_vec(),
        }
    }

    /// Sends `req` and checks the answer: a problem (with `expect`'s status and code when
    /// given), or a 2xx where `may_succeed`.
    async fn check(
        &mut self,
        op: &Operation,
        case: &str,
        req: Req,
        expect: Option<(u16, &str)>,
        may_succeed: bool,
    ) -> Option<Value> {
        let answer = self.send(&req).await;
        let label = format!("{} [{case}] {} {}", op.name(), req.method, req.path);
        let text = String::from_utf8_lossy(&answer.body).to_string();
        if text.contains(CANARY) {
            self.failures
                .push(format!("{label}: the answer repeats the canary: {text}"));
        }
        let mut wrong = Vec::new();
        if !op.responses.contains(&answer.status.to_string()) {
            wrong.push(format!(
                "status {}, which the document does not list for the operation",
                answer.status
            ));
        }
        if !(400..500).contains(&answer.status) {
            wrong.push(format!("status {}", answer.status));
        }
        if answer.content_type != "application/problem+json" {
            wrong.push(format!("content-type `{}`", answer.content_type));
        }
        let problem: Option<Value> = serde_json::from_slice(&answer.body).ok();
        let code = problem
            .as_ref()
            .and_then(|p| p["code"].as_str())
            .unwrap_or("-");
        *self
            .tally
            .entry(format!("{} {code}", answer.status))
            .or_default() += 1;
        if (200..300).contains(&answer.status) && may_succeed {
            return None;
        }
        match &problem {
            None => wrong.push("a body that is not JSON".into()),
            Some(p) => {
                let code = p["code"].as_str().unwrap_or_default();
                if code.is_empty() {
                    wrong.push("no `code`".into());
                }
                if p["type"] != format!("urn:bridle:problem:{code}") {
                    wrong.push("a `type` not naming the code".into());
                }
                if p["status"] != answer.status {
                    wrong.push("a `status` that is not the answer's".into());
                }
                let said = |k: &str| p[k].as_str().is_some_and(|s| !s.is_empty());
                if !said("detail") || !said("title") {
                    wrong.push("no `detail` or `title`".into());
                }
                if let Some((status, code)) = expect
                    && (answer.status != status || p["code"] != code)
                {
                    wrong.push(format!("not {status} `{code}`"));
                }
            }
        }
        if !wrong.is_empty() {
            self.failures
                .push(format!("{label}: {} — {text}", wrong.join(", ")));
        }
        problem
    }
}

/// A value of the wrong JSON type for `schema`.
fn wrong_type(schema: &Value) -> Value {
    match type_of(schema) {
        Some("string") => json!(12345),
        Some("integer" | "number") => json!("sweep"),
        Some("boolean") => json!("sweep"),
        Some("array") => json!({"sweep": 1}),
        Some("object") => json!([1, 2]),
        _ => json!([[]]),
    }
}

/// A value of the right type for `schema`, meaning nothing in particular.
fn plausible(schema: &Value) -> Value {
    match type_of(schema) {
        Some("string") => json!("sweep"),
        Some("integer" | "number") => json!(0),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        _ => json!({}),
    }
}

/// A body with the required properties only, each a plausible value.
fn plausible_body(schema: &Value) -> Value {
    let mut body = Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        body.insert(name.into(), plausible(&schema["properties"][name]));
    }
    Value::Object(body)
}

fn properties(schema: &Value) -> Vec<(String, Value)> {
    schema["properties"]
        .as_object()
        .map(|ps| ps.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Path parameter values no resource is named, each encoded as sent, and whether it must go
/// over a plain socket (a URL library resolves `..` and `.` before sending).
fn hostile_segments() -> Vec<(&'static str, String, bool)> {
    vec![
        ("unknown name", "sweep-nothing-here".into(), false),
        ("unknown id", "987654321".into(), false),
        ("dot-dot", "..".into(), true),
        ("dot", ".".into(), true),
        ("dot-dot inside", "a..b".into(), false),
        ("encoded traversal", "..%2F..%2Fbridle.yaml".into(), false),
        ("encoded slash", "%2F".into(), false),
        ("space", "a%20b".into(), false),
        ("NUL", "a%00b".into(), false),
        ("unicode", "%C3%A9t%C3%A9-%F0%9F%A6%80".into(), false),
        ("invalid UTF-8", "%FF%FE".into(), false),
        ("300 characters", "a".repeat(300), false),
        ("negative", "-1".into(), false),
        ("u64 overflow", "18446744073709551616".into(), false),
        ("not a number", "abc".into(), false),
        ("fraction", "1.5".into(), false),
    ]
}

/// Stands for a query parameter given twice (`?p=1&p=2`).
const DUPLICATE: &str = "<twice>";

/// Query values of the wrong type or out of range for `param`, and whether a 2xx is right.
fn hostile_queries(param: &Param) -> Vec<(String, bool)> {
    let mut v = hostile_values(param);
    if param.location == "query" {
        v.push((DUPLICATE.into(), false));
    }
    v
}

fn hostile_values(param: &Param) -> Vec<(String, bool)> {
    let long = "a".repeat(300);
    match type_of(&param.schema) {
        Some("integer" | "number") => {
            let mut v: Vec<String> = ["abc", "-1", "1.5", "18446744073709551616", "", "1e3"]
                .map(String::from)
                .into();
            if let Some(max) = param.schema["maximum"].as_u64() {
                v.push((max + 1).to_string());
            }
            if param.name == "limit" {
                // Every list pages by 1 to at most a thousand (MAX_LIMIT for most).
                v.push("0".into());
                v.push((MAX_LIMIT * 10_000).to_string());
            }
            v.into_iter().map(|s| (s, false)).collect()
        }
        Some("boolean") => ["maybe", "2", "", "yes%00"]
            .map(|s| (s.to_string(), false))
            .into(),
        _ => {
            let free = FREE_TEXT_QUERIES.contains(&param.name.as_str());
            [
                "sweep-garbage",
                "%FF%FE",
                "a%00b",
                "-1",
                long.as_str(),
                "!!",
            ]
            .map(|s| (s.to_string(), free))
            .into()
        }
    }
}

fn memory() -> MemoryService {
    MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    )
}

/// What must be the same before and after the sweep.
async fn state(gw: &Gw) -> Value {
    let get = |path: &'static str| async move {
        json_ok(gw.get(path).send().await.unwrap(), StatusCode::OK).await
    };
    let agents: Vec<Value> = get("/agents").await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| json!([a["name"], a["agent_type"], a["projects"]]))
        .collect();
    let secrets: Vec<Value> = get("/secrets").await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([s["name"], s["active_version"]]))
        .collect();
    json!({
        "agents": agents,
        "projects": get("/projects").await["items"],
        "secrets": secrets,
        "patterns": get("/projects/demo/patterns").await,
        "demo": get("/projects/demo").await["yaml"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_refuses_hostile_input_with_a_problem() {
    // A feed whose only source is a local file, so the feed routes are on and nothing leaves
    // the machine.
    let guide = tempfile::tempdir().unwrap();
    let page = guide.path().join("guide.md");
    std::fs::write(&page, "# Guide\n").unwrap();
    let feed = format!(
        "vendor_feed:\n  profiles:\n    codex:\n      - url: '{}'\n",
        page.display()
    );
    let service = memory();
    let gw = Gw::start_with_yaml(&feed, move |b| b.memory(service)).await;
    let root = gw.base.strip_suffix(BASE_PATH).unwrap().to_string();

    // The resources the fixtures name: a proposal, two tickets, a secret, a pattern with an
    // example indexed once (its run's id).
    let proposal = gw
        .ctx
        .store
        .propose(
            "demo",
            &Origin::agent("claude", Some("sess-1".into())),
            &ChangeRequest::Guardrail {
                id: "sweep-guardrail".into(),
                statement: "A statement.".into(),
                severity: Severity::HardInstruction,
                applies_to: vec!["all_agents".into()],
            },
            None,
        )
        .unwrap()
        .id;
    let ticket = || {
        gw.ctx
            .store
            .request_scope("demo", "claude", None, "push", "needed")
            .unwrap()
            .id
    };
    let (approve_ticket, deny_ticket) = (ticket(), ticket());
    json_ok(
        gw.post("/secrets")
            .json(&json!({"name": SECRET, "value": "sweep-value"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("lib.rs"),
        "pub fn sweep() -> u32 {\n    1\n}\n",
    )
    .unwrap();
    for (path, body) in [
        ("/projects/demo/patterns", json!({"name": PATTERN})),
        (
            "/projects/demo/patterns/sweep-pattern/examples",
            json!({"url": repo.path().display().to_string(), "reference_tag": EXAMPLE}),
        ),
    ] {
        json_ok(
            gw.post(path).json(&body).send().await.unwrap(),
            StatusCode::CREATED,
        )
        .await;
    }
    let started = json_ok(
        gw.post("/projects/demo/patterns/sweep-pattern/examples/sweep-example/index-runs")
            .send()
            .await
            .unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    let run = started["run"]["id"].as_str().unwrap().to_string();
    // The run writes `last_indexed` back when done: wait for it, so the state compared below
    // is settled.
    Events::new(
        gw.get(&format!("/index-runs/{run}/events"))
            .send()
            .await
            .unwrap(),
    )
    .until("done")
    .await;
    let fx = Fixtures {
        proposal,
        approve_ticket,
        deny_ticket,
        run,
    };
    let before = state(&gw).await;

    let doc = json_ok(
        gw.http.get(gw.url("/openapi.json")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let ops = operations(&doc);
    let mut sweep = Sweep {
        gw: &gw,
        root,
        sent: 0,
        tally: BTreeMap::new(),
        failures: Vec::new(),
    };
    let (mut with_body, mut with_path, mut with_query) = (0, 0, 0);
    for op in &ops {
        let may = |case: &str| MAY_SUCCEED.contains(&(op.name().as_str(), case));

        // Path parameters: each hostile in turn, the others naming real things; a body that
        // parses, so it is the path that is judged.
        let path_params: Vec<&Param> = op.params.iter().filter(|p| p.location == "path").collect();
        if !path_params.is_empty() {
            with_path += 1;
        }
        for p in &path_params {
            for (case, segment, raw) in hostile_segments() {
                let mut req = Req::new(op.method.clone(), fx.path(op, Some((&p.name, &segment))));
                if let Some(b) = &op.body {
                    req = req.json(&plausible_body(&b.schema));
                }
                req.raw = raw;
                sweep
                    .check(op, &format!("{} {case}", p.name), req, None, false)
                    .await;
            }
        }

        // Query and header parameters, with the path naming real things.
        let path = fx.path(op, None);
        for p in op.params.iter().filter(|p| p.location != "path") {
            with_query += 1;
            for (value, free) in hostile_queries(p) {
                let case = format!("{} {}={value:.20}", p.location, p.name);
                let mut req = Req::new(op.method.clone(), path.clone());
                if value == DUPLICATE {
                    req.path = format!("{path}?{0}=1&{0}=2", p.name);
                } else if p.location == "query" {
                    req.path = format!("{path}?{}={value}", p.name);
                } else {
                    req.header = Some((p.name.clone(), value.clone()));
                }
                let expect = match type_of(&p.schema) {
                    _ if value == DUPLICATE => Some((400, "invalid_query")),
                    Some("integer" | "number" | "boolean") if p.location == "query" => {
                        Some((400, "invalid_query"))
                    }
                    _ => None,
                };
                sweep.check(op, &case, req, expect, free).await;
            }
        }

        // The body.
        let Some(body) = &op.body else { continue };
        with_body += 1;
        let schema = &body.schema;
        let invalid = Some((422, "invalid_request"));
        let req = || Req::new(op.method.clone(), path.clone());
        sweep
            .check(
                op,
                "text body",
                req().bytes("text/plain", format!("name=sweep&value={CANARY}")),
                Some((415, "unsupported_media_type")),
                false,
            )
            .await;
        // JSON broken before any field is read (a field is judged as soon as it is read, so
        // an unknown one would be refused first), and a body cut short.
        let cut = serde_json::to_string(&plausible_body(schema)).unwrap();
        for (case, text) in [
            ("malformed JSON", format!("{{,\"value\": \"{CANARY}\"}}")),
            ("truncated JSON", cut[..cut.len() - 1].to_string()),
        ] {
            sweep
                .check(
                    op,
                    case,
                    req().bytes("application/json", text),
                    Some((400, "malformed_json")),
                    false,
                )
                .await;
        }
        for (case, top) in [
            ("array", json!([{}])),
            ("number", json!(42)),
            ("string", json!("sweep")),
            ("null", Value::Null),
        ] {
            // A body the document allows to be `null` is sent so at the end.
            if case == "null" && body.nullable {
                continue;
            }
            sweep
                .check(op, case, req().json(&top), invalid, may(case))
                .await;
        }
        let props = properties(schema);
        if !props.is_empty() {
            let all_wrong: Map<String, Value> = props
                .iter()
                .map(|(k, s)| (k.clone(), wrong_type(s)))
                .collect();
            sweep
                .check(
                    op,
                    "every property of the wrong type",
                    req().json(&Value::Object(all_wrong)),
                    invalid,
                    false,
                )
                .await;
        }
        for (name, s) in &props {
            if !matches!(type_of(s), Some("integer")) {
                continue;
            }
            let mut out_of_range = vec![json!(-1), json!(1.5)];
            out_of_range.push(serde_json::from_str("18446744073709551616").unwrap());
            if let Some(max) = s["maximum"].as_u64() {
                out_of_range.push(json!(max + 1));
            }
            for v in out_of_range {
                let mut b = plausible_body(schema);
                b[name.as_str()] = v.clone();
                sweep
                    .check(op, &format!("{name}={v}"), req().json(&b), invalid, false)
                    .await;
            }
        }
        // A secret's value beside a field that fails: the refusal never repeats the value.
        if props.iter().any(|(k, _)| k == "value") {
            let mut b = plausible_body(schema);
            for (name, s) in &props {
                b[name.as_str()] = match type_of(s) {
                    _ if name == "value" => json!(CANARY),
                    Some("string") => json!("sweep bad/name é"),
                    Some("integer") => json!(-1),
                    _ => wrong_type(s),
                };
            }
            sweep
                .check(op, "secret beside a bad field", req().json(&b), None, false)
                .await;
        }
        // Names no resource may have, one property at a time.
        for (name, s) in props
            .iter()
            .filter(|(k, _)| NAME_PROPERTIES.contains(&k.as_str()))
        {
            let free = FREE_NAMES
                .iter()
                .find(|(o, p, _)| *o == op.name() && p == name)
                .map(|(_, _, f)| *f);
            if free == Some(Free::NotSent) {
                continue;
            }
            for bad in hostile_names() {
                let mut b = plausible_body(schema);
                b[name.as_str()] = match type_of(s) {
                    Some("array") => json!([bad]),
                    _ => json!(bad),
                };
                let case = format!("{name}={:.20}", format!("{bad:?}"));
                let may_succeed = free == Some(Free::MaySucceed);
                sweep
                    .check(op, &case, req().json(&b), None, may_succeed)
                    .await;
            }
        }
        // Every body refuses fields it does not know (the document says so too).
        assert_eq!(
            schema["additionalProperties"],
            false,
            "{}: the body's schema denies unknown fields",
            op.name()
        );
        let mut unknown = plausible_body(schema);
        unknown["sweep_unknown_field"] = json!(CANARY);
        if let Some(p) = sweep
            .check(op, "unknown field", req().json(&unknown), invalid, false)
            .await
        {
            let detail = p["detail"].as_str().unwrap_or_default();
            if !detail.contains("unknown field") {
                sweep.failures.push(format!(
                    "{} [unknown field]: the detail does not say so: {p}",
                    op.name()
                ));
            }
        }
        // One byte over the limit, as JSON that would otherwise parse.
        let padding = DEFAULT_BODY_LIMIT + 1 - r#"{"sweep":""}"#.len();
        let big = format!(r#"{{"sweep":"{}"}}"#, "x".repeat(padding));
        assert_eq!(big.len(), DEFAULT_BODY_LIMIT + 1);
        sweep
            .check(
                op,
                "one byte over the limit",
                req().bytes("application/json", big),
                Some((413, "body_too_large")),
                false,
            )
            .await;
        // Last, what some operations take (and act on): `null` where the document allows it,
        // which must be taken as no body, then `{}`.
        if body.nullable {
            let answer = sweep.send(&req().json(&Value::Null)).await;
            if !(200..300).contains(&answer.status) {
                sweep.failures.push(format!(
                    "{} [null]: the document allows a `null` body, yet {} — {}",
                    op.name(),
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                ));
            }
        }
        sweep
            .check(
                op,
                "empty object",
                req().json(&json!({})),
                // Where `{}` may be taken, what it met decides a refusal's code.
                invalid.filter(|_| !may("empty object")),
                may("empty object"),
            )
            .await;
    }

    let sent = sweep.sent;
    eprintln!("answers by status and code: {:?}", sweep.tally);
    let failures = std::mem::take(&mut sweep.failures);
    eprintln!(
        "swept {} operations ({with_body} with a body, {with_path} with path parameters, \
         {with_query} query or header parameters) with {sent} requests",
        ops.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {sent} answers are wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(ops.len() > 50, "the document lists every operation");

    // Still alive, and nothing the sweep should not have changed has changed.
    let health = gw
        .http
        .get(gw.mcp.replace("/mcp", "/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(state(&gw).await, before);
    gw.stop().await;
}
