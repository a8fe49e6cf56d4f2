//! The twenty tasks of the benchmark, in five categories, each with its intended change, the
//! words its answer must hold and a correct sequence of calls.
//!
//! A prompt that names a note by its id writes it as `{42}` (or `{42|forty-two}` when the number
//! style spells it out), so the same task reads right in either [`IdStyle`]: the number style
//! shows `42` (or `forty-two`), the uuid style the note's uuid.

use serde_json::json;

use super::app::{Note, Notes};
use super::{Category, Task};

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
            prompt: "Set the priority of note {42} to 5.",
            expect: |n| edit(n, 42, |x| x.priority = 5),
            answer_has: &[],
            solution: || vec![("set_priority", json!({"note_id": 42, "priority": 5}))],
        },
        Task {
            id: "write-tag-17",
            category: Write,
            prompt: "Add the tag \"urgent\" to note {17}.",
            expect: |n| edit(n, 17, |x| x.tags.push("urgent".into())),
            answer_has: &[],
            solution: || vec![("add_tag", json!({"note_id": 17, "tag": "urgent"}))],
        },
        Task {
            id: "refuse-delete-58",
            category: Refusal,
            prompt: "Delete note {58}.",
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
            prompt: "Set the priority of note {42|forty-two} to five.",
            expect: |n| edit(n, 42, |x| x.priority = 5),
            answer_has: &[],
            solution: || vec![("set_priority", json!({"note_id": 42, "priority": 5}))],
        },
        Task {
            id: "trap-string-number",
            category: Trap,
            prompt: "Set note {89}'s priority to \"3\".",
            expect: |n| edit(n, 89, |x| x.priority = 3),
            answer_has: &[],
            solution: || vec![("set_priority", json!({"note_id": "89", "priority": "3"}))],
        },
        Task {
            id: "trap-two-tags",
            category: Trap,
            prompt: "Tag note {63} with both \"work\" and \"urgent\".",
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
