//! The index-run registry: every (re-)index of a pattern-example repository the gateway runs,
//! whether the admin API or the `refresh_pattern_example` tool started it.
//!
//! One run per reference tag at a time: [`IndexRuns::start`] claims the tag and hands back a
//! [`RunHandle`], and a second start for that tag is refused with the running run's id
//! ([`Busy`]) until the handle is finished or dropped. A run records every event it has had
//! (`started`, `progress`, then one `done` or `error`), so a follower that comes late, or a
//! browser that reconnects with `Last-Event-ID`, replays them from wherever it asks
//! ([`Run::follow`]) and then sees the new ones as they happen. Finished runs stay readable
//! for a while: the last [`KEEP_FINISHED`] of them, so a follower that opens the stream after
//! the run ended still gets the whole story and its end. Nothing here touches the stores; the
//! runs' owners do the work and report it.
//!
//! Removing an example claims its tag too ([`IndexRuns::begin_removal`]), from before the
//! project's document is edited until the tag's chunks are purged: a removal is refused while a
//! run has the tag, and a run is refused ([`Claimed::Removing`], code `example_removing`) while
//! a removal has it. Otherwise a run that started between a removal's check and its purge
//! wrote back, after the purge, chunks no project lists.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bridle_memory::ProgressEvent;
use futures::Stream;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

/// The `report` a finished run's `done` event carries (an index's figures; its source is left
/// out, as it is shown elsewhere redacted).
pub fn report_event(report: &bridle_memory::IndexReport) -> Value {
    json!({
        "reference_tag": report.reference_tag,
        "arch_tag": report.arch_tag,
        "files": report.files,
        "chunks": report.chunks,
        "replaced": report.replaced,
        "last_indexed": report.last_indexed,
    })
}

/// How many finished runs stay readable (the oldest is forgotten first).
pub const KEEP_FINISHED: usize = 64;

/// The most events one run keeps; past that, a new `progress` replaces the previous one (the
/// newest state is what matters), while `started`, `done` and `error` are always kept.
pub const MAX_EVENTS: usize = 4096;

/// What an event of a run says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunEventKind {
    /// The run began (its tag, where it reads from, who started it).
    Started,
    /// A step: `step`, `message`, `done`, `total`.
    Progress,
    /// The run ended well: its report.
    Done,
    /// The run failed: `code` and `detail`; the previous index is kept.
    Error,
}

impl RunEventKind {
    /// The event's name on a Server-Sent Events stream.
    pub fn as_str(self) -> &'static str {
        match self {
            RunEventKind::Started => "started",
            RunEventKind::Progress => "progress",
            RunEventKind::Done => "done",
            RunEventKind::Error => "error",
        }
    }

    fn ends(self) -> bool {
        matches!(self, RunEventKind::Done | RunEventKind::Error)
    }
}

/// One event of a run.
#[derive(Debug, Clone, Serialize)]
pub struct RunEvent {
    /// Its position in the run, from 0 (the SSE event id).
    pub seq: u64,
    /// What it says.
    pub kind: RunEventKind,
    /// Its data (a JSON object).
    pub data: Value,
}

/// Who started a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunOrigin {
    /// The admin API (the panel included).
    Api,
    /// The MCP tool `refresh_pattern_example`.
    Tool,
}

/// What a run is, as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunStatus {
    /// The run's id.
    pub id: String,
    /// The example's reference tag.
    pub reference_tag: String,
    /// The project whose document listed it, when the API started the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The pattern, when the API started the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Where it was started.
    pub origin: RunOrigin,
    /// Who started it (`admin:<name>@<surface>`, or the agent's name).
    pub actor: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// `running`, `done` or `error`.
    pub state: String,
    /// The last step's count of chunks done, if a step had one.
    pub done: f64,
    /// The last step's total, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// How many events it has had.
    pub events: u64,
}

/// Where a run comes from and what it works on, given when it starts.
#[derive(Debug, Clone)]
pub struct RunStart {
    /// The example's reference tag (the run's claim).
    pub reference_tag: String,
    /// The project, when known.
    pub project: Option<String>,
    /// The pattern, when known.
    pub pattern: Option<String>,
    /// Where it was started.
    pub origin: RunOrigin,
    /// Who started it.
    pub actor: String,
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<RunEvent>,
    next_seq: u64,
    ended: Option<RunEventKind>,
    done: f64,
    total: Option<f64>,
}

/// One index run: what it works on and every event it has had.
#[derive(Debug)]
pub struct Run {
    id: String,
    start: RunStart,
    started_at: String,
    log: Mutex<Log>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Run {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The example's reference tag.
    pub fn reference_tag(&self) -> &str {
        &self.start.reference_tag
    }

    /// Whether it has ended (with `done` or `error`).
    pub fn ended(&self) -> bool {
        self.log().ended.is_some()
    }

    /// What it is now.
    pub fn status(&self) -> RunStatus {
        let log = self.log();
        RunStatus {
            id: self.id.clone(),
            reference_tag: self.start.reference_tag.clone(),
            project: self.start.project.clone(),
            pattern: self.start.pattern.clone(),
            origin: self.start.origin.clone(),
            actor: self.start.actor.clone(),
            started_at: self.started_at.clone(),
            state: match log.ended {
                None => "running",
                Some(RunEventKind::Done) => "done",
                Some(_) => "error",
            }
            .to_string(),
            done: log.done,
            total: log.total,
            events: log.next_seq,
        }
    }

    fn push(&self, kind: RunEventKind, data: Value) {
        {
            let mut log = self.log();
            if log.ended.is_some() {
                return;
            }
            if kind == RunEventKind::Progress {
                if let Some(d) = data.get("done").and_then(Value::as_f64) {
                    log.done = d;
                }
                if let Some(t) = data.get("total").and_then(Value::as_f64) {
                    log.total = Some(t);
                }
            }
            let seq = log.next_seq;
            log.next_seq += 1;
            let event = RunEvent { seq, kind, data };
            let full = log.events.len() >= MAX_EVENTS;
            match log.events.last_mut() {
                Some(last) if full && kind == RunEventKind::Progress && last.kind == kind => {
                    *last = event;
                }
                _ => log.events.push(event),
            }
            if kind.ends() {
                log.ended = Some(kind);
            }
        }
        self.changed.send_replace(self.log().next_seq);
    }

    /// The run's events from the first whose `seq` is at least `from`: those it has had, then
    /// each new one as it happens; the stream ends after `done` or `error`.
    pub fn follow(self: Arc<Self>, from: u64) -> impl Stream<Item = RunEvent> + Send + 'static {
        let rx = self.changed.subscribe();
        futures::stream::unfold((self, rx, from), |(run, mut rx, next)| async move {
            loop {
                rx.borrow_and_update();
                let found = {
                    let log = run.log();
                    let at = log.events.partition_point(|e| e.seq < next);
                    match log.events.get(at) {
                        Some(e) => Ok(e.clone()),
                        None => Err(log.ended.is_some()),
                    }
                };
                match found {
                    Ok(e) => {
                        let after = e.seq + 1;
                        return Some((e, (run, rx, after)));
                    }
                    Err(true) => return None,
                    Err(false) => {
                        // The sender lives in the run, which this stream holds: `changed` only
                        // returns once a new event is in.
                        if rx.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            }
        })
    }
}

/// The claim on a running run: report its steps, then finish it. Dropped without
/// [`RunHandle::finish`] (the task that ran it panicked or was cancelled), the run ends with an
/// `error` event `index_interrupted`. Either way the tag is released, before the end is told:
/// a follower told `done` or `error` may start the next run on the tag, or remove the example,
/// at once.
#[derive(Debug)]
pub struct RunHandle {
    run: Arc<Run>,
    runs: IndexRuns,
    /// The end [`RunHandle::finish`] gave, told once the tag is released.
    end: Option<(RunEventKind, Value)>,
}

impl RunHandle {
    /// The run.
    pub fn run(&self) -> &Arc<Run> {
        &self.run
    }

    /// Records one step of the work (the URL it fetches, redacted).
    pub fn progress(&self, event: &ProgressEvent) {
        let (done, total) = event.fraction();
        let step = match event {
            ProgressEvent::Fetching { .. } => "fetching",
            ProgressEvent::Chunked { .. } => "chunked",
            ProgressEvent::Embedded { .. } => "embedded",
            ProgressEvent::Storing { .. } => "storing",
            _ => "working",
        };
        let message = match event {
            ProgressEvent::Fetching { source } => format!("fetching {}", redact_url(source)),
            other => other.message(),
        };
        self.run.push(
            RunEventKind::Progress,
            json!({"step": step, "message": message, "done": done, "total": total}),
        );
    }

    /// Ends the run with `done` (`data`: its report) or `error` (`data`: `code`, `detail`).
    pub fn finish(mut self, kind: RunEventKind, data: Value) {
        let kind = if kind.ends() {
            kind
        } else {
            RunEventKind::Error
        };
        // Told when the handle drops, right below, once the tag is released.
        self.end = Some((kind, data));
    }
}

impl Drop for RunHandle {
    fn drop(&mut self) {
        // The tag first: whoever hears the end may claim it again at once.
        self.runs.release(&self.run);
        let (kind, data) = self.end.take().unwrap_or_else(|| {
            (
                RunEventKind::Error,
                json!({"code": "index_interrupted", "detail": "the index run stopped before it ended; the previous index is kept"}),
            )
        });
        self.run.push(kind, data);
    }
}

/// A start or a removal refused: the tag is being indexed by run `run_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// The tag.
    pub reference_tag: String,
    /// The running run.
    pub run_id: String,
}

/// Why a run could not start on a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// Another run is indexing the tag (code `index_running`).
    Indexing(Busy),
    /// An example with the tag is being removed, its chunks about to be purged (code
    /// `example_removing`).
    Removing {
        /// The tag.
        reference_tag: String,
    },
}

impl Claimed {
    /// The stable code of the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Claimed::Indexing(_) => "index_running",
            Claimed::Removing { .. } => "example_removing",
        }
    }
}

impl std::fmt::Display for Claimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Claimed::Indexing(busy) => write!(
                f,
                "example `{}` is being indexed now (run {}); try again when that run has ended",
                busy.reference_tag, busy.run_id
            ),
            Claimed::Removing { reference_tag } => write!(
                f,
                "example `{reference_tag}` is being removed now; add it again to index it"
            ),
        }
    }
}

/// A removal's claim on its examples' tags ([`IndexRuns::begin_removal`]): no run starts on them
/// until it is dropped, which the remover does once the chunks are purged (or the removal
/// failed).
#[derive(Debug)]
#[must_use = "the tags are free again as soon as the removal is dropped"]
pub struct Removal {
    runs: IndexRuns,
    tags: Vec<String>,
}

impl Drop for Removal {
    fn drop(&mut self) {
        let mut reg = self.runs.registry();
        for tag in &self.tags {
            if let Some(n) = reg.removing.get_mut(tag) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    reg.removing.remove(tag);
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// Reference tag → the run working on it.
    running: BTreeMap<String, String>,
    /// Reference tag → how many removals hold it now (two projects may remove examples of one
    /// tag at once).
    removing: BTreeMap<String, usize>,
    runs: HashMap<String, Arc<Run>>,
    finished: VecDeque<String>,
    next: u64,
}

/// The gateway's index runs, shared by the admin API and the `refresh_pattern_example` tool.
#[derive(Debug, Clone, Default)]
pub struct IndexRuns(Arc<Mutex<Registry>>);

impl IndexRuns {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a run on `start.reference_tag`, or says which run has it now, or that an example
    /// of that tag is being removed.
    pub fn start(&self, start: RunStart) -> Result<RunHandle, Claimed> {
        let mut reg = self.registry();
        if let Some(id) = reg.running.get(&start.reference_tag) {
            return Err(Claimed::Indexing(Busy {
                reference_tag: start.reference_tag.clone(),
                run_id: id.clone(),
            }));
        }
        if reg.removing.contains_key(&start.reference_tag) {
            return Err(Claimed::Removing {
                reference_tag: start.reference_tag.clone(),
            });
        }
        reg.next += 1;
        let id = format!("{}-{}", run_prefix(), reg.next);
        let (changed, _) = tokio::sync::watch::channel(0);
        let run = Arc::new(Run {
            id: id.clone(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            start,
            log: Mutex::new(Log::default()),
            changed,
        });
        reg.running
            .insert(run.start.reference_tag.clone(), id.clone());
        reg.runs.insert(id, Arc::clone(&run));
        drop(reg);
        run.push(
            RunEventKind::Started,
            json!({
                "run_id": run.id,
                "reference_tag": run.start.reference_tag,
                "project": run.start.project,
                "pattern": run.start.pattern,
                "origin": run.start.origin,
            }),
        );
        Ok(RunHandle {
            run,
            runs: self.clone(),
            end: None,
        })
    }

    fn release(&self, run: &Arc<Run>) {
        let mut reg = self.registry();
        if reg.running.get(run.reference_tag()) == Some(&run.id) {
            reg.running.remove(run.reference_tag());
        }
        reg.finished.push_back(run.id.clone());
        while reg.finished.len() > KEEP_FINISHED {
            if let Some(old) = reg.finished.pop_front() {
                reg.runs.remove(&old);
            }
        }
    }

    /// Claims `tags` for a removal: refused, claiming none, when a run has one of them; else
    /// no run starts on any of them until the [`Removal`] is dropped.
    pub fn begin_removal<I, T>(&self, tags: I) -> Result<Removal, Busy>
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        let tags: Vec<String> = tags.into_iter().map(Into::into).collect();
        let mut reg = self.registry();
        if let Some((tag, id)) = tags
            .iter()
            .find_map(|t| reg.running.get(t).map(|id| (t, id)))
        {
            return Err(Busy {
                reference_tag: tag.clone(),
                run_id: id.clone(),
            });
        }
        for tag in &tags {
            *reg.removing.entry(tag.clone()).or_default() += 1;
        }
        drop(reg);
        Ok(Removal {
            runs: self.clone(),
            tags,
        })
    }

    /// Whether `tag` is being indexed now.
    pub fn is_running(&self, tag: &str) -> bool {
        self.registry().running.contains_key(tag)
    }

    /// The run working on `tag` now, if any.
    pub fn running(&self, tag: &str) -> Option<Arc<Run>> {
        let reg = self.registry();
        reg.running
            .get(tag)
            .and_then(|id| reg.runs.get(id))
            .cloned()
    }

    /// A run, running or among the recently finished.
    pub fn get(&self, id: &str) -> Option<Arc<Run>> {
        self.registry().runs.get(id).cloned()
    }
}

/// A per-process prefix for run ids, so an id from before a restart names no new run.
fn run_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 6];
        if getrandom::fill(&mut bytes).is_err() {
            let t = chrono::Utc::now().timestamp_micros();
            bytes.copy_from_slice(&t.to_le_bytes()[..6]);
        }
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// A URL without its user information or query (`https://user:token@host/x` →
/// `https://***@host/x`): a git URL may carry a credential, which never goes into an answer,
/// event or log line. The one rule memory itself applies to every source it shows.
pub use bridle_memory::repo::redact_url;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use futures::StreamExt;

    use super::*;

    fn start(tag: &str) -> RunStart {
        RunStart {
            reference_tag: tag.into(),
            project: None,
            pattern: None,
            origin: RunOrigin::Tool,
            actor: "bot".into(),
        }
    }

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(
            redact_url("https://bot:s3cret@git.example/x.git"),
            "https://***@git.example/x.git"
        );
        // A user part may hold an unencoded `/` (a token pasted as is): everything up to the
        // last `@` is hidden, so an `@` in the path hides more than needed, never less.
        assert_eq!(
            redact_url("https://bot:ab/cd@git.example/x.git"),
            "https://***@git.example/x.git"
        );
        assert_eq!(redact_url("https://git.example/x@y"), "https://***@y");
        assert_eq!(redact_url("/srv/repos/x"), "/srv/repos/x");
    }

    #[tokio::test]
    async fn one_run_per_tag_and_a_late_follower_replays_everything() {
        let runs = IndexRuns::default();
        let h = runs.start(start("a")).unwrap();
        let id = h.run().id().to_string();
        match runs.start(start("a")).unwrap_err() {
            Claimed::Indexing(busy) => assert_eq!(busy.run_id, id),
            other => panic!("{other:?}"),
        }
        let other = runs.start(start("b")).unwrap();
        h.progress(&ProgressEvent::Embedded { done: 1, total: 2 });
        h.finish(RunEventKind::Done, json!({"chunks": 2}));
        assert!(!runs.is_running("a"));
        let late: Vec<_> = runs.get(&id).unwrap().follow(0).collect().await;
        let kinds: Vec<_> = late.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                RunEventKind::Started,
                RunEventKind::Progress,
                RunEventKind::Done
            ]
        );
        let resumed: Vec<_> = runs.get(&id).unwrap().follow(2).collect().await;
        assert_eq!(resumed.len(), 1);
        assert_eq!(runs.get(&id).unwrap().status().state, "done");
        drop(other);
        let b = runs.running("b");
        assert!(b.is_none());
        assert!(runs.start(start("a")).is_ok());
    }

    #[test]
    fn a_removal_and_a_run_of_one_tag_exclude_each_other() {
        let runs = IndexRuns::default();
        let run = runs.start(start("a")).unwrap();
        let busy = runs.begin_removal(["b", "a"]).unwrap_err();
        assert_eq!(busy.reference_tag, "a");
        assert_eq!(busy.run_id, run.run().id());
        // Refused, it claimed nothing: `b` still starts.
        drop(runs.start(start("b")).unwrap());
        drop(run);

        let removal = runs.begin_removal(["a"]).unwrap();
        let second = runs.begin_removal(["a"]).unwrap();
        let refused = runs.start(start("a")).unwrap_err();
        assert_eq!(refused.code(), "example_removing");
        assert!(refused.to_string().contains("`a`"), "{refused}");
        drop(removal);
        assert_eq!(
            runs.start(start("a")).unwrap_err().code(),
            "example_removing",
            "the other removal still holds it"
        );
        drop(second);
        assert!(runs.start(start("a")).is_ok());
    }

    #[tokio::test]
    async fn a_dropped_handle_ends_the_run_with_an_error() {
        let runs = IndexRuns::default();
        let h = runs.start(start("a")).unwrap();
        let run = Arc::clone(h.run());
        let follower = tokio::spawn(Arc::clone(&run).follow(0).collect::<Vec<_>>());
        drop(h);
        let events = follower.await.unwrap();
        let last = events.last().unwrap();
        assert_eq!(last.kind, RunEventKind::Error);
        assert_eq!(last.data["code"], "index_interrupted");
        assert!(!runs.is_running("a"));
    }

    #[test]
    fn finished_runs_are_kept_up_to_a_bound_and_events_are_bounded() {
        let runs = IndexRuns::default();
        let first = runs.start(start("t")).unwrap();
        let first_id = first.run().id().to_string();
        for n in 0..MAX_EVENTS + 10 {
            first.progress(&ProgressEvent::Embedded {
                done: n,
                total: MAX_EVENTS + 10,
            });
        }
        assert!(first.run().log().events.len() <= MAX_EVENTS);
        first.finish(RunEventKind::Done, json!({}));
        assert_eq!(
            runs.get(&first_id)
                .unwrap()
                .log()
                .events
                .last()
                .unwrap()
                .kind,
            RunEventKind::Done
        );
        for _ in 0..KEEP_FINISHED {
            runs.start(start("t"))
                .unwrap()
                .finish(RunEventKind::Done, json!({}));
        }
        assert!(runs.get(&first_id).is_none());
    }
}
