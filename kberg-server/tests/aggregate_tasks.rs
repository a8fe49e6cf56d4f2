//! The aggregator and an upstream's tasks: the aggregator declares the tasks extension to its
//! upstreams, so an upstream tool that runs only as a task works through it. The forwarded call
//! follows the task: it outlasts the call timeout of one request, relays the task's questions to
//! the calling client and answers them upstream, and a cancelled call cancels the upstream task.
//! A `ForwardHook` learns how the task ended (its result, a failed task, a timeout, a cancel),
//! not just that it was created.
//! The upstream is a Kberg server over real HTTP on 127.0.0.1; its tools signal the test and
//! wait for its release, so nothing depends on timing.

mod peers;

use kberg_testkit::eventually_async_ok;
use kberg_testkit::serve::{RunningServer, loopback};

use peers::*;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kberg_core::{
    CallOptions, CancellationToken, ClientPeer, PeerError, Principal, TaskStatus, TaskSupport,
    ToolBuilder, ToolOutput, ToolRegistry,
};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Forward, ForwardHook, ForwardOutcome, OutgoingCall,
    UpstreamConfig, UpstreamTransport,
};
use kberg_server::{McpApp, OpenAccess};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

/// The call timeout of one request in the test that follows a task past it: long enough for any
/// one request on a loaded machine (each `tasks/get` of the task must be answered within it,
/// or the call rightly ends `upstream_timeout`), and half of how long the `long` task works.
const ONE_REQUEST: Duration = Duration::from_secs(3);

/// The credential the hook test's aggregator sends its upstream, which the `refuses` task quotes.
const CANARY: &str = "canary-51e0c7a9d2b84f36";

struct Upstream {
    url: String,
    app: McpApp,
    started: mpsc::UnboundedReceiver<()>,
    release: watch::Sender<bool>,
    _stop: StopOnDrop,
}

async fn upstream() -> Upstream {
    let tools = ToolRegistry::new();
    let (started_tx, started) = mpsc::unbounded_channel();
    let (release, release_rx) = watch::channel(false);
    tools
        .register(
            ToolBuilder::new("index")
                .description("Indexes until released; only as a task")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), move |_a, _ctx| {
                    let started = started_tx.clone();
                    let mut release = release_rx.clone();
                    async move {
                        let _ = started.send(());
                        let _ = release.wait_for(|r| *r).await;
                        Ok(ToolOutput::text("indexed"))
                    }
                }),
        )
        .expect("register index");
    tools
        .register(
            ToolBuilder::new("confirm")
                .description("Asks the user, as a task")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    let a = ctx
                        .elicit(
                            "Proceed?",
                            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                        )
                        .await?;
                    Ok(ToolOutput::text(format!("answer: {}", a["action"])))
                }),
        )
        .expect("register confirm");
    tools
        .register(
            ToolBuilder::new("long")
                .description("Works two call timeouts of the test's aggregator")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    tokio::time::sleep(2 * ONE_REQUEST).await;
                    Ok(ToolOutput::text("long done"))
                }),
        )
        .expect("register long");
    tools
        .register(
            ToolBuilder::new("broken")
                .description("A task that fails: its tool panics")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    panic!("the index is corrupt")
                }),
        )
        .expect("register broken");
    tools
        .register(
            ToolBuilder::new("refuses")
                .description("A task whose result is an error quoting the aggregator's credential")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    Ok(ToolOutput::error_with(
                        "no",
                        json!({"code": format!("bad_token:{CANARY}")}),
                    ))
                }),
        )
        .expect("register refuses");
    let app = McpApp::builder("upstream", "1").tools(tools).build();
    let server = RunningServer::start(
        app.clone(),
        loopback().auth(OpenAccess::as_principal(Principal::new("aggregator"))),
    )
    .await;
    let url = server.url.clone();
    let stop = server.into_guard();
    Upstream {
        url,
        app,
        started,
        release,
        _stop: stop,
    }
}

async fn aggregate(url: &str, call_timeout: Duration) -> (Aggregator, ToolRegistry) {
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("up", UpstreamTransport::http(url.to_string()))
            .call_timeout(call_timeout),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    (agg, registry)
}

/// The calling client: answers elicitations with `accept`.
struct Accepts;

#[async_trait]
impl ClientPeer for Accepts {
    async fn notify(&self, _method: &str, _params: Value) -> Result<(), PeerError> {
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        _params: Value,
        _cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        assert_eq!(method, "elicitation/create");
        Ok(json!({"action": "accept", "content": {"ok": true}}))
    }
    fn supports(&self, capability: &str) -> bool {
        capability == "elicitation"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_only_upstream_tool_is_followed_past_the_call_timeout() {
    let mut up = upstream().await;
    // One request may take `ONE_REQUEST`; the `long` task works twice that, polled in short
    // requests.
    let (agg, registry) = aggregate(&up.url, ONE_REQUEST).await;
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "up__long", json!({}), CallOptions::default()),
    )
    .await
    .expect("the call ends")
    .expect("not refused");
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.all_text(), "long done");
    // A task held until released ends when it is released.
    let call = tokio::spawn({
        let registry = registry.clone();
        async move {
            registry
                .call(&reader(), "up__index", json!({}), CallOptions::default())
                .await
        }
    });
    tokio::time::timeout(WAIT, up.started.recv())
        .await
        .expect("the upstream task started")
        .expect("open");
    up.release.send_replace(true);
    let out = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
        .expect("joined")
        .expect("not refused");
    assert_eq!(out.all_text(), "indexed");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_tasks_questions_reach_the_calling_client() {
    let up = upstream().await;
    let (agg, registry) = aggregate(&up.url, Duration::from_secs(10)).await;
    let opts = CallOptions::default().with_peer(Arc::new(Accepts));
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "up__confirm", json!({}), opts),
    )
    .await
    .expect("the call ends")
    .expect("not refused");
    assert_eq!(out.all_text(), "answer: \"accept\"", "{out:?}");
    // Without a client channel the question cannot be asked: the call fails, and the upstream
    // task is cancelled rather than left waiting.
    let e = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "up__confirm", json!({}), CallOptions::default()),
    )
    .await
    .expect("the call ends")
    .expect_err("no client to ask");
    assert_eq!(e.code().as_str(), "tool_failed", "{e}");
    eventually_async_ok("the upstream task to be cancelled", || {
        let statuses: Vec<TaskStatus> = up
            .app
            .tasks()
            .list("aggregator")
            .iter()
            .map(|t| t.status)
            .collect();
        let seen = if statuses.contains(&TaskStatus::Cancelled) {
            Ok(())
        } else {
            Err(format!("{statuses:?}"))
        };
        async move { seen }
    })
    .await;
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_cancels_the_upstream_task() {
    let mut up = upstream().await;
    let (agg, registry) = aggregate(&up.url, Duration::from_secs(10)).await;
    let cancel = CancellationToken::new();
    let call = tokio::spawn({
        let registry = registry.clone();
        let cancel = cancel.clone();
        async move {
            registry
                .call(
                    &reader(),
                    "up__index",
                    json!({}),
                    CallOptions::with_cancel(cancel),
                )
                .await
        }
    });
    tokio::time::timeout(WAIT, up.started.recv())
        .await
        .expect("the upstream task started")
        .expect("open");
    let id = up.app.tasks().list("aggregator")[0].id.clone();
    cancel.cancel();
    let e = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
        .expect("joined")
        .expect_err("cancelled");
    assert_eq!(e.code().as_str(), "cancelled", "{e}");
    let t = tokio::time::timeout(WAIT, up.app.tasks().wait("aggregator", &id))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the upstream task ends: {:?}",
                up.app.tasks().list("aggregator")
            )
        })
        .expect("still kept");
    assert_eq!(t.status, TaskStatus::Cancelled);
    agg.shutdown().await;
}

/// The calling client: accepts every elicitation and notes each question it was asked.
struct NotesQuestions(std::sync::Mutex<Vec<String>>);

#[async_trait]
impl ClientPeer for NotesQuestions {
    async fn notify(&self, _method: &str, _params: Value) -> Result<(), PeerError> {
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        params: Value,
        _cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        assert_eq!(method, "elicitation/create");
        let message = params["message"].as_str().unwrap_or_default().to_string();
        self.0.lock().expect("not poisoned").push(message);
        Ok(json!({"action": "accept", "content": {"ok": true}}))
    }
    fn supports(&self, capability: &str) -> bool {
        capability == "elicitation"
    }
}

/// The extension lets an upstream acknowledge `tasks/update` before its `tasks/get` shows the
/// answer (keys are unique over a task's life, and clients track them): the scripted upstream
/// lists the answered `q1` again in its next three views, the last beside a new `q2`. The
/// client is asked each question once, and each key goes upstream in one update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_task_question_is_not_asked_again_while_the_upstream_catches_up() {
    let (registry, agg) = raw_aggregator(|t| t.env("RAW_TASKS", "stale")).await;
    let client = Arc::new(NotesQuestions(std::sync::Mutex::new(Vec::new())));
    let opts = CallOptions::default().with_peer(client.clone());
    let out = tokio::time::timeout(WAIT, registry.call(&reader(), "raw__ask", json!({}), opts))
        .await
        .expect("the call ends")
        .expect("not refused");
    assert!(!out.is_error, "{out:?}");
    let updates: Value = serde_json::from_str(&out.all_text()).expect("the upstream's record");
    assert_eq!(updates, json!([["q1"], ["q2"]]), "each key answered once");
    assert_eq!(
        *client.0.lock().expect("not poisoned"),
        ["first?", "second?"],
        "each question asked once"
    );
    agg.shutdown().await;
}

/// An upstream task that stays `working` past its `ttlMs` was polled until the caller gave
/// up, however long that took. The scripted upstream's task has a ttl of 1 ms and answers
/// `working` to every poll: the call ends `upstream_timeout` once it was polled past its ttl,
/// and the upstream task is cancelled.
/// The scripted upstream's record of its tasks (`raw__task_log`), once it shows its first task
/// cancelled.
async fn raw_task_cancelled(registry: &ToolRegistry) -> Value {
    eventually_async_ok("the upstream task to be cancelled", || async {
        let out = registry
            .call(
                &reader(),
                "raw__task_log",
                json!({}),
                CallOptions::default(),
            )
            .await
            .expect("task_log answers");
        let log: Value = serde_json::from_str(&out.all_text()).expect("the upstream's record");
        if log["cancelled"] == json!(["task-1"]) {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_task_still_working_past_its_ttl_ends_upstream_timeout() {
    let (registry, agg) = raw_aggregator(|t| t.env("RAW_TASKS", "stuck")).await;
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "raw__stuck", json!({}), CallOptions::default()),
    )
    .await
    .expect("the call ends although its task never does")
    .expect("answered with a refusal, not a failure");
    assert!(out.is_error, "{out:?}");
    let refusal = out.structured.as_ref().expect("a refusal");
    assert_eq!(refusal["code"], "upstream_timeout", "{refusal}");
    assert_eq!(refusal["upstream"], "raw", "{refusal}");
    assert_eq!(refusal["tool"], "raw__stuck", "{refusal}");
    // It was polled, then cancelled upstream (the cancel is sent as the call ends).
    let log = raw_task_cancelled(&registry).await;
    assert!(log["polls"].as_u64() >= Some(1), "{log}");
    agg.shutdown().await;
}

/// The calling client: never answers what it is asked, and tells the test each question's
/// method as it is asked.
struct NeverAnswers(mpsc::UnboundedSender<String>);

#[async_trait]
impl ClientPeer for NeverAnswers {
    async fn notify(&self, _method: &str, _params: Value) -> Result<(), PeerError> {
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        _params: Value,
        _cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        let _ = self.0.send(method.to_string());
        std::future::pending().await
    }
    fn supports(&self, capability: &str) -> bool {
        capability == "elicitation"
    }
}

/// A task's question waited for the calling client's answer as long as the client took, its
/// time to live passing unnoticed. The scripted upstream's `stuck_ask` task asks on every poll
/// and lives `RAW_CALL_TIMEOUT` (time enough to be asked, on a loaded machine too); its client
/// never answers: the call ends `upstream_timeout` with the task's life, and the upstream task
/// is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_task_question_waits_no_longer_than_the_task_lives() {
    let ttl = RAW_CALL_TIMEOUT.as_millis().to_string();
    let (registry, agg) =
        raw_aggregator(|t| t.env("RAW_TASKS", "stuck").env("RAW_TASK_TTL", ttl)).await;
    let (asked_tx, mut asked) = mpsc::unbounded_channel();
    let opts = CallOptions::default().with_peer(Arc::new(NeverAnswers(asked_tx)));
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "raw__stuck_ask", json!({}), opts),
    )
    .await
    .expect("the call ends although its client never answers")
    .expect("answered with a refusal, not a failure");
    assert!(out.is_error, "{out:?}");
    let refusal = out.structured.as_ref().expect("a refusal");
    assert_eq!(refusal["code"], "upstream_timeout", "{refusal}");
    assert_eq!(refusal["upstream"], "raw", "{refusal}");
    assert_eq!(
        asked.try_recv().ok().as_deref(),
        Some("elicitation/create"),
        "the client was asked"
    );
    raw_task_cancelled(&registry).await;
    agg.shutdown().await;
}

/// Records how each forwarded call ended, as its `ForwardHook` is told.
#[derive(Default)]
struct Outcomes(std::sync::Mutex<Vec<String>>);

impl ForwardHook for Outcomes {
    fn outgoing(&self, _call: &OutgoingCall<'_>, _meta: &mut Map<String, Value>) -> tracing::Span {
        tracing::Span::none()
    }

    fn finished(&self, _span: &tracing::Span, outcome: ForwardOutcome<'_>) {
        self.0.lock().expect("lock").push(format!("{outcome:?}"));
    }
}

impl Outcomes {
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("lock"))
    }
}

/// A call the upstream runs as a task was reported to the hook `Answered` as soon as the task
/// was created, so a trace showed success for a task that then failed. The hook now learns the
/// task's end: its result (answered, or a tool error with its code, redacted), a failed task,
/// a call cancelled while its task ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forward_hook_learns_how_an_upstream_task_ended() {
    let mut up = upstream().await;
    let registry = ToolRegistry::new();
    let hook = Arc::new(Outcomes::default());
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new(
            "up",
            UpstreamTransport::http(up.url.clone())
                .header("authorization", format!("Bearer {CANARY}")),
        )
        .call_timeout(Duration::from_secs(10)),
    );
    let agg = Aggregator::start_with(
        config,
        registry.clone(),
        Forward::new().hook(Arc::clone(&hook) as Arc<dyn ForwardHook>),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    let call = |tool: &'static str, opts: CallOptions| {
        let registry = registry.clone();
        async move {
            tokio::time::timeout(WAIT, registry.call(&reader(), tool, json!({}), opts))
                .await
                .expect("the call ends")
        }
    };

    let e = call("up__broken", CallOptions::default())
        .await
        .expect_err("the task failed");
    assert_eq!(e.code().as_str(), "tool_failed", "{e}");
    assert_eq!(hook.taken(), [r#"Failed { code: "tool_failed" }"#]);

    let out = call("up__refuses", CallOptions::default())
        .await
        .expect("a result");
    assert!(out.is_error, "{out:?}");
    assert_eq!(
        hook.taken(),
        [r#"ToolError { code: Some("bad_token:[redacted]") }"#]
    );

    // Cancelled while its task runs: the gate drops the call, and the hook still hears of it.
    let cancel = CancellationToken::new();
    let running = tokio::spawn(call("up__index", CallOptions::with_cancel(cancel.clone())));
    tokio::time::timeout(WAIT, up.started.recv())
        .await
        .expect("the upstream task started")
        .expect("open");
    assert_eq!(hook.taken(), Vec::<String>::new(), "not ended yet");
    cancel.cancel();
    let e = running.await.expect("joined").expect_err("cancelled");
    assert_eq!(e.code().as_str(), "cancelled", "{e}");
    assert_eq!(hook.taken(), [r#"Failed { code: "cancelled" }"#]);

    up.release.send_replace(true);
    let out = call("up__index", CallOptions::default())
        .await
        .expect("a result");
    assert_eq!(out.all_text(), "indexed");
    assert_eq!(hook.taken(), ["Answered"]);
    agg.shutdown().await;
}

/// A task still working past its time to live ends the call `upstream_timeout`: so does the
/// hook's record of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forward_hook_learns_of_a_task_that_outlived_its_ttl() {
    let registry = ToolRegistry::new();
    let hook = Arc::new(Outcomes::default());
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("raw", raw_upstream().env("RAW_TASKS", "stuck"))
            .call_timeout(Duration::from_secs(10)),
    );
    let agg = Aggregator::start_with(
        config,
        registry.clone(),
        Forward::new().hook(Arc::clone(&hook) as Arc<dyn ForwardHook>),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "raw__stuck", json!({}), CallOptions::default()),
    )
    .await
    .expect("the call ends")
    .expect("a refusal");
    assert!(out.is_error, "{out:?}");
    assert_eq!(hook.taken(), [r#"Failed { code: "upstream_timeout" }"#]);
    agg.shutdown().await;
}

/// A failed upstream task's message is the upstream's text, which nothing but the upstream
/// bounds: it was passed to the caller whole (a megabyte of it in the model's context), where
/// every other message an upstream's error quotes is cut at 1,000 characters. It is now cut the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upstream_tasks_long_message_is_cut() {
    let (registry, agg) = raw_aggregator(|t| t.env("RAW_TASKS", "fails")).await;
    let e = tokio::time::timeout(
        WAIT,
        registry.call(
            &reader(),
            "raw__fails",
            json!({"fail_chars": 100_000}),
            CallOptions::default(),
        ),
    )
    .await
    .expect("the call ends")
    .expect_err("the task failed");
    assert_eq!(e.code().as_str(), "tool_failed", "{e}");
    let said = e.to_string();
    assert!(said.contains("failed: xxx"), "{said}");
    assert!(said.len() < 2_000, "{} bytes", said.len());
    assert!(said.contains("..."), "{said}");
    agg.shutdown().await;
}

/// A task status this protocol revision does not have (a later revision's) is the task going
/// on, as the aggregator means to treat it: it was read as a malformed answer, so the call
/// ended `upstream_invalid_result` and the task was cancelled upstream. The scripted upstream's
/// task is `paused` for two polls, then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_status_of_a_later_revision_is_polled_on() {
    let (registry, agg) = raw_aggregator(|t| t.env("RAW_TASKS", "paused")).await;
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "raw__pause", json!({}), CallOptions::default()),
    )
    .await
    .expect("the call ends")
    .expect("not refused");
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.all_text(), "resumed");
    agg.shutdown().await;
}

/// A view of a task in a status this revision has, which the client library still cannot
/// read (`completed` without its result), is a malformed answer, not a later revision's
/// status to poll on: the call ends `upstream_invalid_result` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_view_of_a_known_task_status_is_upstream_invalid_result() {
    let (registry, agg) = raw_aggregator(|t| t.env("RAW_TASKS", "fails")).await;
    let out = tokio::time::timeout(
        WAIT,
        registry.call(
            &reader(),
            "raw__fails",
            json!({"malformed": true}),
            CallOptions::default(),
        ),
    )
    .await
    .expect("the call ends")
    .expect("a refusal");
    assert!(out.is_error, "{out:?}");
    let refusal = out.structured.as_ref().expect("a refusal");
    assert_eq!(refusal["code"], "upstream_invalid_result", "{refusal}");
    agg.shutdown().await;
}
