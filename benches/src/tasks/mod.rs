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
//! of them off. Every task runs in either id style of the app ([`IdStyle`]): two-digit numbers,
//! or uuids, the ids the loop's short handles are for.

pub mod app;
mod list;

pub use list::tasks;

use std::sync::Arc;
use std::time::Instant;

use kberg_agent::{
    Agent, AgentConfig, ChatOptions, InferenceProvider, Interventions, LocalSurface, Message,
    RunOutcome,
};
use kberg_core::{Caller, Grants, Principal, SurfaceProjection};
use serde_json::Value;

pub use app::IdStyle;
use app::{NOTES_WRITE, Notes, NotesApp};

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
    /// What the user says, with each note id it names written `{42}` (see [`Task::prompt_in`]).
    pub prompt: &'static str,
    /// The intended change, applied to the seed notes.
    pub expect: fn(&mut Notes),
    /// Words the answer must contain (each, ignoring case).
    pub answer_has: &'static [&'static str],
    /// A correct sequence of calls in the number style, for the benchmark's own soundness test
    /// ([`Task::solution_in`] for either style).
    pub solution: fn() -> Vec<(&'static str, Value)>,
}

impl Task {
    /// What the user says in the id style `ids`: each `{42}` of [`Task::prompt`] as the note's
    /// id in that style, and each `{42|forty-two}` as the words in the number style (the trap of
    /// a number in words) or the uuid.
    pub fn prompt_in(&self, ids: IdStyle) -> String {
        let mut out = String::with_capacity(self.prompt.len());
        let mut rest = self.prompt;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                break;
            };
            let inner = &rest[open + 1..close];
            let (number, words) = inner.split_once('|').unwrap_or((inner, ""));
            out.push_str(&rest[..open]);
            match (number.parse::<u32>(), ids) {
                (Ok(_), IdStyle::Number) if !words.is_empty() => out.push_str(words),
                (Ok(id), _) => out.push_str(&ids.show(id)),
                (Err(_), _) => out.push_str(&rest[open..=close]),
            }
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }

    /// [`Task::solution`] with its note ids written in the style `ids`.
    pub fn solution_in(&self, ids: IdStyle) -> Vec<(&'static str, Value)> {
        (self.solution)()
            .into_iter()
            .map(|(name, args)| (name, ids.translate_arguments(args)))
            .collect()
    }
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
            fired: |i| i.words_requested > 0 || i.thinking_cut_off > 0,
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
        // The three request bounds are off by default until a live run measures them; each
        // variant turns one on and runs every task.
        Variant {
            name: "ground-write-text",
            config: b().ground_write_text(true),
            fired: |_| true,
        },
        Variant {
            name: "stop-unrequested-writes",
            config: b().stop_unrequested_writes(true),
            fired: |_| true,
        },
        Variant {
            name: "hold-writes-after-reads",
            config: b().hold_writes_after_reads(true),
            fired: |_| true,
        },
        Variant {
            // The three together.
            name: "request-bounds",
            config: b()
                .ground_write_text(true)
                .stop_unrequested_writes(true)
                .hold_writes_after_reads(true),
            fired: |_| true,
        },
        Variant {
            name: "no-focused-answer-turns",
            config: b().focused_answer_turns(false),
            fired: |i| i.answer_turns_focused > 0,
        },
        Variant {
            name: "no-narrow-after-guessed-ids",
            config: b().narrow_after_guessed_ids(false),
            fired: |i| i.turns_narrowed > 0,
        },
        Variant {
            name: "no-forget-old-failures",
            config: b().forget_old_failures(false),
            fired: |i| i.failures_forgotten > 0,
        },
        Variant {
            name: "id-handles",
            config: b().id_handles(true),
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

/// Runs `task` once on a fresh app showing ids in the style `ids`, with `provider` and
/// `config`, and grades it.
pub async fn run_task(
    task: &Task,
    ids: IdStyle,
    provider: Arc<dyn InferenceProvider>,
    config: AgentConfig,
) -> Result<TaskResult, kberg_core::CoreError> {
    let app = NotesApp::with_ids(ids)?;
    let surface = LocalSurface::new(app.registry().clone(), caller());
    let agent = Agent::from_arcs(provider, Arc::new(surface)).with_config(config);
    let start = Instant::now();
    let outcome = agent
        .run(
            vec![Message::user(task.prompt_in(ids))],
            &Default::default(),
        )
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
    use serde_json::json;

    fn scripted(task: &Task, ids: IdStyle) -> ScriptedProvider {
        let mut turns: Vec<ChatResponse> = task
            .solution_in(ids)
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
    async fn every_task_passes_with_its_scripted_solution_in_both_id_styles() {
        for ids in [IdStyle::Number, IdStyle::Uuid] {
            for task in tasks() {
                let provider = Arc::new(scripted(&task, ids));
                let r = run_task(&task, ids, provider, base_config()).await.unwrap();
                assert!(r.pass, "{} ({}): {r:?}", task.id, ids.as_str());
            }
        }
    }

    #[test]
    fn prompts_name_notes_in_the_id_style() {
        let all = tasks();
        let find = |id: &str| all.iter().find(|t| t.id == id).unwrap();
        let words = find("trap-words-number");
        assert_eq!(
            words.prompt_in(IdStyle::Number),
            "Set the priority of note forty-two to five."
        );
        assert_eq!(
            words.prompt_in(IdStyle::Uuid),
            format!("Set the priority of note {} to five.", app::uuid_of(42))
        );
        let tag = find("write-tag-17");
        assert_eq!(
            tag.prompt_in(IdStyle::Number),
            "Add the tag \"urgent\" to note 17."
        );
        for t in &all {
            for ids in [IdStyle::Number, IdStyle::Uuid] {
                assert!(!t.prompt_in(ids).contains('{'), "{}", t.id);
            }
        }
        assert_eq!(
            find("multi-gym-tag").solution_in(IdStyle::Uuid)[1].1,
            json!({"note_id": app::uuid_of(63), "tag": "weekly"})
        );
    }

    #[test]
    fn uuids_are_distinct_well_formed_and_read_back_only_for_known_notes() {
        let seeds: Vec<u32> = app::seed_notes().keys().copied().collect();
        let uuids: std::collections::HashSet<String> =
            seeds.iter().map(|id| app::uuid_of(*id)).collect();
        assert_eq!(uuids.len(), seeds.len());
        for id in &seeds {
            let u = app::uuid_of(*id);
            assert_eq!(u.len(), 36, "{u}");
            assert_eq!(&u[14..15], "4", "{u}");
            let read = IdStyle::Uuid.read(&json!(u.to_uppercase()), seeds.iter().copied());
            assert_eq!(read, Some(*id));
        }
        let other = app::uuid_of(12345);
        assert_eq!(
            IdStyle::Uuid.read(&json!(other), seeds.iter().copied()),
            None
        );
        assert_eq!(IdStyle::Uuid.read(&json!(17), seeds.iter().copied()), None);
        assert_eq!(
            IdStyle::Number.read(&json!(17), seeds.iter().copied()),
            Some(17)
        );
    }

    #[tokio::test]
    async fn in_the_uuid_style_an_unknown_uuid_is_a_missing_note_and_a_handle_reaches_the_tool() {
        let tasks = tasks();
        let task = tasks
            .iter()
            .find(|t| t.id == "multi-dentist-priority")
            .unwrap();
        // The model copies the handle the search result showed it; the tool gets the uuid.
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
            ScriptedProvider::call(
                "c2",
                "set_priority",
                json!({"note_id": "#1", "priority": 5}),
            ),
            ScriptedProvider::text("Done."),
        ]));
        let r = run_task(
            task,
            IdStyle::Uuid,
            provider.clone(),
            base_config().id_handles(true),
        )
        .await
        .unwrap();
        assert!(r.pass, "{r:?}");
        assert!(r.interventions.handles_issued > 0);
        let seen = format!("{:?}", provider.requests()[1].messages);
        assert!(
            seen.contains("#1") && !seen.contains(&app::uuid_of(17)),
            "{seen}"
        );
        // Without handles the model must copy the uuid; a wrong one is a missing note.
        let task = tasks.iter().find(|t| t.id == "read-dentist-time").unwrap();
        let wrong = app::uuid_of(12345);
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
            ScriptedProvider::call("c2", "get_note", json!({"note_id": wrong})),
            ScriptedProvider::text("I could not read it."),
        ]));
        let r = run_task(task, IdStyle::Uuid, provider.clone(), base_config())
            .await
            .unwrap();
        assert!(!r.pass && r.state_ok);
        let said = format!("{:?}", provider.requests()[2].messages);
        assert!(
            said.contains(&format!("There is no note with note_id {wrong}")),
            "{said}"
        );
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
        let r = run_task(task, IdStyle::Number, provider.clone(), base_config())
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
        let r = run_task(task, IdStyle::Number, provider, base_config())
            .await
            .unwrap();
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
        let r = run_task(task, IdStyle::Number, provider, base_config())
            .await
            .unwrap();
        assert_eq!(r.writes_without_capability, 0);
        assert!(r.state_ok);
    }
}
