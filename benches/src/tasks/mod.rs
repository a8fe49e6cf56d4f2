//! The agent task benchmark: twenty multi-turn tasks over the note-taking app in [`app`], graded
//! on the final state of the notes and on the answer.
//!
//! Each task is a user request in one of five categories (read and answer, single write,
//! refusal, multi-step chains that need an id from an earlier call, traps with arguments of the
//! wrong type). A task passes when the run ends with an answer in words
//! ([`RunOutcome::answered`]), the notes equal the seed notes with the task's intended change
//! applied (nothing else changed), and the answer contains the task's key words. Every run is
//! also checked for a write that ran without its capability (`archive_note`, whose capability
//! the caller never holds); the gate makes that impossible, and the benchmark counts it anyway.
//!
//! The runner (`src/bin/agent_tasks.rs`) drives real models; [`variants`] are the loop
//! configurations compared: the defaults, each small-model behaviour turned off alone, and all
//! of them off.

pub mod app;

use std::sync::Arc;
use std::time::Instant;

use kberg_agent::{
    Agent, AgentConfig, ChatOptions, InferenceProvider, Interventions, LocalSurface, Message,
    RunOutcome,
};
use kberg_core::{Caller, Grants, Principal, SurfaceProjection};
use serde_json::{Value, json};

use app::{NOTES_WRITE, Note, Notes, NotesApp};

/// A task's category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Read a note and answer a question about it.
    Read,
    /// One write whose ids are given.
    Write,
    /// A request the app refuses (a refused tool, a capability the caller lacks).
    Refusal,
    /// Find an id first, then write with it.
    MultiStep,
    /// Arguments given in the wrong type or shape.
    Trap,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 5] = [
        Category::Read,
        Category::Write,
        Category::Refusal,
        Category::MultiStep,
        Category::Trap,
    ];

    /// The category's name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Read => "read",
            Category::Write => "write",
            Category::Refusal => "refusal",
            Category::MultiStep => "multi-step",
            Category::Trap => "trap",
        }
    }
}

/// One task.
#[derive(Debug, Clone)]
pub struct Task {
    /// A stable id.
    pub id: &'static str,
    /// Its category.
    pub category: Category,
    /// What the user says.
    pub prompt: &'static str,
    /// The intended change, applied to the seed notes.
    pub expect: fn(&mut Notes),
    /// Words the answer must contain (each, ignoring case).
    pub answer_has: &'static [&'static str],
    /// A correct sequence of calls, for the benchmark's own soundness test.
    pub solution: fn() -> Vec<(&'static str, Value)>,
}

fn unchanged(_: &mut Notes) {}

fn add(notes: &mut Notes, title: &str, body: &str) {
    let note = Note {
        title: title.into(),
        body: body.into(),
        priority: 3,
        tags: Vec::new(),
        archived: false,
    };
    notes.insert(90, note);
}

fn edit(notes: &mut Notes, id: u32, f: impl FnOnce(&mut Note)) {
    if let Some(n) = notes.get_mut(&id) {
        f(n);
    }
}

/// The twenty tasks.
pub fn tasks() -> Vec<Task> {
    use Category::*;
    vec![
        Task {
            id: "read-dentist-time",
            category: Read,
            prompt: "What time is my dentist appointment?",
            expect: unchanged,
            answer_has: &["10:30"],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "dentist"})),
                    ("get_note", json!({"note_id": 17})),
                ]
            },
        },
        Task {
            id: "read-count",
            category: Read,
            prompt: "How many notes do I have?",
            expect: unchanged,
            answer_has: &["6"],
            solution: || vec![("count_notes", json!({}))],
        },
        Task {
            id: "read-falcon-owner",
            category: Read,
            prompt: "Who is the owner of Project Falcon?",
            expect: unchanged,
            answer_has: &["priya"],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "falcon"})),
                    ("get_note", json!({"note_id": 58})),
                ]
            },
        },
        Task {
            id: "read-groceries",
            category: Read,
            prompt: "What is on my grocery list?",
            expect: unchanged,
            answer_has: &["eggs"],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "groceries"})),
                    ("get_note", json!({"note_id": 42})),
                ]
            },
        },
        Task {
            id: "read-book",
            category: Read,
            prompt: "Which book is my book club reading?",
            expect: unchanged,
            answer_has: &["dune"],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "book club"})),
                    ("get_note", json!({"note_id": 71})),
                ]
            },
        },
        Task {
            id: "write-add-call-mom",
            category: Write,
            prompt: "Add a note titled \"Call mom\" with the text \"Sunday evening\".",
            expect: |n| add(n, "Call mom", "Sunday evening"),
            answer_has: &[],
            solution: || {
                vec![(
                    "add_note",
                    json!({"title": "Call mom", "body": "Sunday evening"}),
                )]
            },
        },
        Task {
            id: "write-add-passport",
            category: Write,
            prompt: "Create a note called \"Passport\" that says \"Renew before June\".",
            expect: |n| add(n, "Passport", "Renew before June"),
            answer_has: &[],
            solution: || {
                vec![(
                    "add_note",
                    json!({"title": "Passport", "body": "Renew before June"}),
                )]
            },
        },
        Task {
            id: "write-priority-42",
            category: Write,
            prompt: "Set the priority of note 42 to 5.",
            expect: |n| edit(n, 42, |x| x.priority = 5),
            answer_has: &[],
            solution: || vec![("set_priority", json!({"note_id": 42, "priority": 5}))],
        },
        Task {
            id: "write-tag-17",
            category: Write,
            prompt: "Add the tag \"urgent\" to note 17.",
            expect: |n| edit(n, 17, |x| x.tags.push("urgent".into())),
            answer_has: &[],
            solution: || vec![("add_tag", json!({"note_id": 17, "tag": "urgent"}))],
        },
        Task {
            id: "refuse-delete-58",
            category: Refusal,
            prompt: "Delete note 58.",
            expect: unchanged,
            answer_has: &[],
            solution: Vec::new,
        },
        Task {
            id: "refuse-archive-gym",
            category: Refusal,
            prompt: "Archive my Gym note.",
            expect: unchanged,
            answer_has: &[],
            solution: Vec::new,
        },
        Task {
            id: "refuse-delete-groceries",
            category: Refusal,
            prompt: "Please delete the Groceries note, I don't need it anymore.",
            expect: unchanged,
            answer_has: &[],
            solution: Vec::new,
        },
        Task {
            id: "multi-dentist-priority",
            category: MultiStep,
            prompt: "Set the priority of my Dentist note to 5.",
            expect: |n| edit(n, 17, |x| x.priority = 5),
            answer_has: &[],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "dentist"})),
                    ("set_priority", json!({"note_id": 17, "priority": 5})),
                ]
            },
        },
        Task {
            id: "multi-falcon-tag",
            category: MultiStep,
            prompt: "Tag the Project Falcon note with \"q1\".",
            expect: |n| edit(n, 58, |x| x.tags.push("q1".into())),
            answer_has: &[],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "falcon"})),
                    ("add_tag", json!({"note_id": 58, "tag": "q1"})),
                ]
            },
        },
        Task {
            id: "multi-rename-groceries",
            category: MultiStep,
            prompt: "Rename my Groceries note to \"Shopping list\".",
            expect: |n| edit(n, 42, |x| x.title = "Shopping list".into()),
            answer_has: &[],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "groceries"})),
                    (
                        "rename_note",
                        json!({"note_id": 42, "title": "Shopping list"}),
                    ),
                ]
            },
        },
        Task {
            id: "multi-gym-tag",
            category: MultiStep,
            prompt: "Find my gym note and add the tag \"weekly\" to it.",
            expect: |n| edit(n, 63, |x| x.tags.push("weekly".into())),
            answer_has: &[],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "gym"})),
                    ("add_tag", json!({"note_id": 63, "tag": "weekly"})),
                ]
            },
        },
        Task {
            id: "multi-car-priority",
            category: MultiStep,
            prompt: "Lower the priority of the Car service note to 2.",
            expect: |n| edit(n, 89, |x| x.priority = 2),
            answer_has: &[],
            solution: || {
                vec![
                    ("search_notes", json!({"query": "car service"})),
                    ("set_priority", json!({"note_id": 89, "priority": 2})),
                ]
            },
        },
        Task {
            id: "trap-words-number",
            category: Trap,
            prompt: "Set the priority of note forty-two to five.",
            expect: |n| edit(n, 42, |x| x.priority = 5),
            answer_has: &[],
            solution: || vec![("set_priority", json!({"note_id": 42, "priority": 5}))],
        },
        Task {
            id: "trap-string-number",
            category: Trap,
            prompt: "Set note 89's priority to \"3\".",
            expect: |n| edit(n, 89, |x| x.priority = 3),
            answer_has: &[],
            solution: || vec![("set_priority", json!({"note_id": "89", "priority": "3"}))],
        },
        Task {
            id: "trap-two-tags",
            category: Trap,
            prompt: "Tag note 63 with both \"work\" and \"urgent\".",
            expect: |n| {
                edit(n, 63, |x| {
                    x.tags.extend(["work".to_string(), "urgent".to_string()])
                })
            },
            answer_has: &[],
            solution: || {
                vec![
                    ("add_tag", json!({"note_id": 63, "tag": ["work", "urgent"]})),
                    ("add_tag", json!({"note_id": 63, "tag": "work"})),
                    ("add_tag", json!({"note_id": 63, "tag": "urgent"})),
                ]
            },
        },
    ]
}

/// The system prompt every run starts with.
pub const SYSTEM_PROMPT: &str = "You are the assistant of a note-taking app. You do not know the user's notes: look them up with the tools before you answer, and use the tools to change them. When you are done, answer the user in one or two short sentences.";

/// A loop configuration under comparison.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Its name in reports (`defaults`, `no-<option>`, `none`).
    pub name: &'static str,
    /// The configuration.
    pub config: AgentConfig,
    /// Whether the option this variant turns off acted in a run of the defaults (so this
    /// variant can only differ from the defaults on such runs: at temperature 0 the
    /// conversations are identical up to the first intervention).
    pub fired: fn(&Interventions) -> bool,
}

/// The configuration of the benchmark runs (turn limit 6, temperature 0, 128 tokens a turn).
pub fn base_config() -> AgentConfig {
    AgentConfig::default()
        .system_prompt(SYSTEM_PROMPT)
        .max_turns(6)
        .options(ChatOptions {
            temperature: Some(0.0),
            max_tokens: Some(128),
            seed: Some(7),
            ..ChatOptions::default()
        })
}

/// The defaults, each small-model behaviour off alone, and all of them off.
pub fn variants() -> Vec<Variant> {
    let b = base_config;
    vec![
        Variant {
            name: "defaults",
            config: b(),
            fired: |_| true,
        },
        Variant {
            name: "no-collapse-calls-in-turn",
            config: b().collapse_calls_in_turn(false),
            fired: |i| i.calls_collapsed > 0,
        },
        Variant {
            name: "no-guard-repeated-reads",
            config: b().guard_repeated_reads(false),
            fired: |i| i.reads_deduplicated > 0,
        },
        Variant {
            name: "no-final-answer-turn",
            config: b().final_answer_turn(false),
            fired: |i| i.final_answer_turns > 0,
        },
        Variant {
            name: "no-explain-unlisted-calls",
            config: b().explain_unlisted_calls(false),
            fired: |i| i.unlisted_explained > 0,
        },
        Variant {
            name: "no-diagnose-malformed-calls",
            config: b().diagnose_malformed_calls(false),
            fired: |i| i.parse_diagnostics > 0,
        },
        Variant {
            name: "no-ask-for-words",
            config: b().ask_for_words(false),
            fired: |i| i.words_requested > 0,
        },
        Variant {
            name: "no-id-hints",
            config: b().id_hints(false),
            fired: |i| i.id_hints > 0,
        },
        Variant {
            name: "no-unwrap-schema-arguments",
            config: b().unwrap_schema_arguments(false),
            fired: |i| i.schema_echoes_unwrapped > 0,
        },
        Variant {
            name: "no-ground-write-arguments",
            config: b().ground_write_arguments(false),
            fired: |i| i.ungrounded_writes > 0,
        },
        Variant {
            name: "no-look-before-answering",
            config: b().look_before_answering(false),
            fired: |i| i.look_first_requests > 0,
        },
        Variant {
            name: "no-compact-recovered-turns",
            config: b().compact_recovered_turns(false),
            fired: |i| i.turns_compacted > 0,
        },
        Variant {
            name: "no-drop-unknown-read-arguments",
            config: b().drop_unknown_read_arguments(false),
            fired: |i| i.read_arguments_dropped > 0,
        },
        Variant {
            name: "no-split-array-arguments",
            config: b().split_array_arguments(false),
            fired: |i| i.calls_split > 0,
        },
        Variant {
            name: "no-forget-old-failures",
            config: b().forget_old_failures(false),
            fired: |i| i.failures_forgotten > 0,
        },
        Variant {
            name: "no-id-handles",
            config: b().id_handles(false),
            fired: |i| i.handles_issued > 0,
        },
        Variant {
            name: "none",
            config: b().without_small_model_guards(),
            fired: |_| true,
        },
    ]
}

/// How one task went.
#[derive(Debug, Clone)]
pub struct TaskResult {
    /// The task.
    pub id: &'static str,
    /// Its category.
    pub category: Category,
    /// Answered in words, the state as intended, and the key words in the answer.
    pub pass: bool,
    /// Whether the run ended with an answer in words.
    pub answered: bool,
    /// Whether the notes ended as intended.
    pub state_ok: bool,
    /// Whether the answer held the key words.
    pub answer_ok: bool,
    /// Writes that ran without their capability (must be 0).
    pub writes_without_capability: u32,
    /// The run's stop code.
    pub stop: &'static str,
    /// Model turns.
    pub turns: u32,
    /// Tool calls (run or answered).
    pub calls: usize,
    /// The calls as `turn tool arguments -> outcome` lines, for traces.
    pub trace: Vec<String>,
    /// Tokens in and out.
    pub tokens: u64,
    /// What the loop did for the model.
    pub interventions: Interventions,
    /// Wall time of the run in milliseconds.
    pub millis: u128,
    /// The model's last text.
    pub text: String,
    /// The whole conversation as the model saw it (system prompt, turns, tool results), for
    /// reading a run's trace.
    pub messages: Vec<Message>,
}

/// The caller every task runs as: may edit notes, may not archive, sees the Compact projection.
pub fn caller() -> Caller {
    Caller::new(
        Principal::new("assistant")
            .with_grants(Grants::of([NOTES_WRITE]))
            .with_projection(SurfaceProjection::Compact),
    )
}

/// Grades a finished run of `task` against the app's final state.
pub fn grade(task: &Task, app: &NotesApp, outcome: &RunOutcome, millis: u128) -> TaskResult {
    let mut expected = app::seed_notes();
    (task.expect)(&mut expected);
    let got = app.snapshot();
    let state_ok = expected.len() == got.len()
        && expected
            .iter()
            .zip(got.iter())
            .all(|((ia, a), (ib, b))| ia == ib && a.same_as(b));
    let answer = outcome.answer().unwrap_or("").to_lowercase();
    let answer_ok = task
        .answer_has
        .iter()
        .all(|w| answer.contains(&w.to_lowercase()));
    let writes_without_capability = u32::try_from(
        outcome
            .calls
            .iter()
            .filter(|c| c.name == "archive_note" && c.outcome.as_str() == "ok")
            .count(),
    )
    .unwrap_or(u32::MAX)
        + u32::try_from(got.values().filter(|n| n.archived).count()).unwrap_or(u32::MAX);
    let answered = outcome.answered();
    TaskResult {
        id: task.id,
        category: task.category,
        pass: answered && state_ok && answer_ok && writes_without_capability == 0,
        answered,
        state_ok,
        answer_ok,
        writes_without_capability,
        stop: outcome.stop.code(),
        turns: outcome.turns,
        calls: outcome.calls.len(),
        trace: outcome
            .calls
            .iter()
            .map(|c| {
                format!(
                    "{} {}{} {} -> {}",
                    c.turn,
                    c.name,
                    if c.recovered_from_text { " (text)" } else { "" },
                    c.arguments,
                    c.outcome.as_str()
                )
            })
            .collect(),
        tokens: outcome.usage.total(),
        interventions: outcome.interventions,
        millis,
        text: outcome.text.clone(),
        messages: outcome.messages.clone(),
    }
}

/// Runs `task` once on a fresh app with `provider` and `config`, and grades it.
pub async fn run_task(
    task: &Task,
    provider: Arc<dyn InferenceProvider>,
    config: AgentConfig,
) -> Result<TaskResult, kberg_core::CoreError> {
    let app = NotesApp::new()?;
    let surface = LocalSurface::new(app.registry().clone(), caller());
    let agent = Agent::from_arcs(provider, Arc::new(surface)).with_config(config);
    let start = Instant::now();
    let outcome = agent
        .run(vec![Message::user(task.prompt)], &Default::default())
        .await;
    Ok(grade(task, &app, &outcome, start.elapsed().as_millis()))
}

/// Passes per category, in [`Category::ALL`] order, and the total.
pub fn per_category(results: &[TaskResult]) -> (Vec<(Category, usize, usize)>, usize) {
    let rows = Category::ALL
        .iter()
        .map(|c| {
            let of: Vec<_> = results.iter().filter(|r| r.category == *c).collect();
            (*c, of.iter().filter(|r| r.pass).count(), of.len())
        })
        .collect();
    (rows, results.iter().filter(|r| r.pass).count())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kberg_agent::{ChatResponse, ScriptedProvider};

    fn scripted(task: &Task) -> ScriptedProvider {
        let mut turns: Vec<ChatResponse> = (task.solution)()
            .into_iter()
            .enumerate()
            .map(|(i, (name, args))| ScriptedProvider::call(&format!("c{i}"), name, args))
            .collect();
        let words = if task.answer_has.is_empty() {
            "Done.".to_string()
        } else {
            format!("It says {}.", task.answer_has.join(", "))
        };
        // Twice: a task solved without a call is answered with a request to look first
        // (`look_before_answering`), and the model repeats its answer.
        turns.push(ScriptedProvider::text(words.clone()));
        turns.push(ScriptedProvider::text(words));
        ScriptedProvider::new(turns)
    }

    #[tokio::test]
    async fn there_are_twenty_tasks_over_at_least_eight_tools_in_every_category() {
        let all = tasks();
        assert_eq!(all.len(), 20);
        let (rows, _) = per_category(
            &all.iter()
                .map(|t| TaskResult {
                    id: t.id,
                    category: t.category,
                    pass: false,
                    answered: false,
                    state_ok: false,
                    answer_ok: false,
                    writes_without_capability: 0,
                    stop: "",
                    turns: 0,
                    calls: 0,
                    trace: Vec::new(),
                    tokens: 0,
                    interventions: Interventions::default(),
                    millis: 0,
                    text: String::new(),
                    messages: Vec::new(),
                })
                .collect::<Vec<_>>(),
        );
        assert!(rows.iter().all(|(_, _, n)| *n >= 3), "{rows:?}");
        let app = NotesApp::new().unwrap();
        assert!(app.registry().len() >= 8);
        let ids: std::collections::HashSet<_> = all.iter().map(|t| t.id).collect();
        assert_eq!(ids.len(), 20);
    }

    #[tokio::test]
    async fn every_task_passes_with_its_scripted_solution() {
        for task in tasks() {
            let provider = Arc::new(scripted(&task));
            let r = run_task(&task, provider, base_config()).await.unwrap();
            assert!(r.pass, "{}: {r:?}", task.id);
        }
    }

    #[tokio::test]
    async fn a_wrong_state_or_a_json_answer_fails() {
        let tasks = tasks();
        let task = tasks
            .iter()
            .find(|t| t.id == "multi-dentist-priority")
            .unwrap();
        // An invented id: the write fails, nothing changes, the model gives up in words.
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedProvider::call(
                "c1",
                "set_priority",
                json!({"note_id": 12345, "priority": 5}),
            ),
            ScriptedProvider::text("That note does not exist."),
        ]));
        let r = run_task(task, provider.clone(), base_config())
            .await
            .unwrap();
        assert!(r.answered && !r.state_ok && !r.pass);
        // The invented id has no source: the write is not run, the model told where ids come
        // from.
        assert_eq!(r.interventions.ungrounded_writes, 1);
        let hint = provider.requests()[1].messages.last().cloned().unwrap();
        assert!(format!("{hint:?}").contains("search_notes"), "{hint:?}");
        // A tool's JSON as the answer, twice: not answered.
        let task = tasks.iter().find(|t| t.id == "read-count").unwrap();
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedProvider::text(r#"{"ok": true, "id": 1}"#),
            ScriptedProvider::text(r#"{"ok": true}"#),
        ]));
        let r = run_task(task, provider, base_config()).await.unwrap();
        assert!(!r.answered && !r.pass);
        assert_eq!(r.stop, "no_answer");
    }

    #[tokio::test]
    async fn a_refused_or_ungranted_write_never_changes_the_notes() {
        let tasks = tasks();
        let task = tasks.iter().find(|t| t.id == "refuse-archive-gym").unwrap();
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedProvider::text(r#"{"name": "archive_note", "arguments": {"note_id": 63}}"#),
            ScriptedProvider::call("c2", "archive_note", json!({"note_id": 63})),
            ScriptedProvider::text("I cannot archive notes."),
        ]));
        let r = run_task(task, provider, base_config()).await.unwrap();
        assert_eq!(r.writes_without_capability, 0);
        assert!(r.state_ok);
    }
}
