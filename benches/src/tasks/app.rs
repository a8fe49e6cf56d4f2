//! The note-taking app the agent tasks run against: nine tools and one refusal over an in-memory
//! store, registered in a real [`ToolRegistry`], so every call passes the gate.
//!
//! The tools are what a small desktop app would expose: reads (`search_notes`, `list_notes`,
//! `get_note`, `count_notes`), writes under `notes.write` (`add_note`, `set_priority`, `add_tag`,
//! `rename_note`), a write under `notes.archive`, which the benchmark's caller is never granted
//! (`archive_note`), and a refusal (`delete_note`). Note ids are two-digit numbers that a model
//! cannot guess from a title, so a multi-step task needs the id an earlier call returned.
//!
//! The same app can show its ids as uuids instead ([`IdStyle::Uuid`]): the store and the grading
//! are the same, only what the tools print and accept changes. That is the id a real app hands
//! a model (a database key, a file's hash), and the one a small model copies badly, so the two
//! styles measure what the loop's short handles (`AgentConfig::id_handles`) do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kberg_core::{CoreError, ToolBuilder, ToolError, ToolOutput, ToolRegistry, WriteCapability};
use serde_json::{Value, json};

/// One note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The title.
    pub title: String,
    /// The text.
    pub body: String,
    /// 1 (low) to 5 (high).
    pub priority: u8,
    /// Tags, in the order added.
    pub tags: Vec<String>,
    /// Whether it was archived.
    pub archived: bool,
}

impl Note {
    fn new(title: &str, body: &str, priority: u8, tags: &[&str]) -> Self {
        Self {
            title: title.into(),
            body: body.into(),
            priority,
            tags: tags.iter().map(|t| (*t).to_string()).collect(),
            archived: false,
        }
    }

    /// Whether two notes say the same, ignoring case, surrounding space and a final period in
    /// titles, bodies and tags (a model writes "Call Mom" for "Call mom").
    pub fn same_as(&self, other: &Note) -> bool {
        let tags = |n: &Note| n.tags.iter().map(|t| norm(t)).collect::<Vec<_>>();
        norm(&self.title) == norm(&other.title)
            && norm(&self.body) == norm(&other.body)
            && self.priority == other.priority
            && tags(self) == tags(other)
            && self.archived == other.archived
    }
}

/// Lower case, trimmed, quotes and a final period removed.
pub fn norm(s: &str) -> String {
    s.trim()
        .trim_matches(|c| c == '"' || c == '\'')
        .trim_end_matches('.')
        .trim()
        .to_lowercase()
}

/// The app's notes by id.
pub type Notes = BTreeMap<u32, Note>;

/// The notes every task starts from.
pub fn seed_notes() -> Notes {
    BTreeMap::from([
        (
            17,
            Note::new("Dentist", "Appointment on Friday at 10:30", 2, &["health"]),
        ),
        (
            42,
            Note::new("Groceries", "milk, eggs, bread", 3, &["home"]),
        ),
        (
            58,
            Note::new(
                "Project Falcon",
                "Deadline is March 14; the owner is Priya",
                5,
                &["work"],
            ),
        ),
        (63, Note::new("Gym", "Leg day on Tuesday", 1, &["health"])),
        (
            71,
            Note::new(
                "Book club",
                "We are reading Dune; meeting on the 3rd",
                2,
                &[],
            ),
        ),
        (
            89,
            Note::new("Car service", "Oil change at 40,000 km", 4, &["car"]),
        ),
    ])
}

/// The app: its store, its registry and how it shows ids.
#[derive(Clone)]
pub struct NotesApp {
    notes: Arc<Mutex<Notes>>,
    registry: ToolRegistry,
    ids: IdStyle,
}

impl std::fmt::Debug for NotesApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotesApp")
            .field("notes", &self.snapshot().len())
            .finish_non_exhaustive()
    }
}

/// How the app shows note ids to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdStyle {
    /// Two-digit numbers (`note_id 17`); `note_id` is an integer.
    #[default]
    Number,
    /// Uuids (`note_id 3f2a9c1e-...`), one fixed uuid per note; `note_id` is a string.
    Uuid,
}

impl IdStyle {
    /// The style's name on the command line and in reports (`number`, `uuid`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdStyle::Number => "number",
            IdStyle::Uuid => "uuid",
        }
    }

    /// The style named `name` (see [`IdStyle::as_str`]).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "number" => Some(IdStyle::Number),
            "uuid" => Some(IdStyle::Uuid),
            _ => None,
        }
    }

    /// How note `id` is shown in this style.
    pub fn show(self, id: u32) -> String {
        match self {
            IdStyle::Number => id.to_string(),
            IdStyle::Uuid => uuid_of(id),
        }
    }

    /// The id, among `known`, of the note shown as `value`: a whole number in the number style,
    /// a uuid (any case) in the uuid style.
    pub fn read(self, value: &Value, mut known: impl Iterator<Item = u32>) -> Option<u32> {
        match self {
            IdStyle::Number => value.as_u64().and_then(|n| u32::try_from(n).ok()),
            IdStyle::Uuid => {
                let text = value.as_str()?.trim().to_ascii_lowercase();
                known.find(|id| uuid_of(*id) == text)
            }
        }
    }

    /// `value` (a call argument written for the number style) as this style writes it: an
    /// integer or numeric string under `note_id` becomes the note's uuid.
    pub fn translate_arguments(self, mut value: Value) -> Value {
        if self == IdStyle::Uuid
            && let Some(slot) = value.get_mut("note_id")
        {
            let id = slot
                .as_u64()
                .or_else(|| slot.as_str().and_then(|s| s.trim().parse().ok()))
                .and_then(|n| u32::try_from(n).ok());
            if let Some(id) = id {
                *slot = Value::String(uuid_of(id));
            }
        }
        value
    }
}

/// The fixed uuid of note `id`: bits mixed from the id, so two notes' uuids share no pattern a
/// model could complete, with the version-4 and variant bits of a random uuid.
pub fn uuid_of(id: u32) -> String {
    // splitmix64: a fixed, well-spread mix; no randomness, so every run sees the same uuids.
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(u64::from(id).wrapping_add(0x9e37_79b9_7f4a_7c15));
    let b = mix(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// The capability of ordinary edits (granted in the benchmark).
pub const NOTES_WRITE: &str = "notes.write";
/// The capability of archiving (never granted in the benchmark).
pub const NOTES_ARCHIVE: &str = "notes.archive";

fn lock(m: &Mutex<Notes>) -> MutexGuard<'_, Notes> {
    // A poisoned lock only means a tool panicked mid-update; the store has no torn state.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn line(ids: IdStyle, id: u32, n: &Note) -> String {
    let id = ids.show(id);
    let tags = if n.tags.is_empty() {
        "none".to_string()
    } else {
        n.tags.join(", ")
    };
    format!(
        "note_id {id}: \"{}\" (priority {}, tags: {tags})",
        n.title, n.priority
    )
}

/// The note a call's `note_id` names. In the uuid style a string that is no note's uuid is
/// answered as a missing note, with the value as written (the schema already made it a string).
fn id_arg(ids: IdStyle, a: &Value, notes: &Notes) -> Result<u32, ToolError> {
    ids.read(&a["note_id"], notes.keys().copied())
        .ok_or_else(|| match ids {
            IdStyle::Number => ToolError::failed("note_id must be a whole number"),
            IdStyle::Uuid => ToolError::failed(format!(
                "There is no note with note_id {}.",
                a["note_id"].as_str().unwrap_or("")
            )),
        })
}

fn no_note(ids: IdStyle, id: u32) -> ToolError {
    ToolError::failed(format!("There is no note with note_id {}.", ids.show(id)))
}

impl NotesApp {
    /// A fresh app holding [`seed_notes`], its ids two-digit numbers.
    pub fn new() -> Result<Self, CoreError> {
        Self::with_ids(IdStyle::Number)
    }

    /// A fresh app holding [`seed_notes`], showing and taking ids in the style `ids`.
    pub fn with_ids(ids: IdStyle) -> Result<Self, CoreError> {
        let app = Self {
            notes: Arc::new(Mutex::new(seed_notes())),
            registry: ToolRegistry::new(),
            ids,
        };
        app.register()?;
        Ok(app)
    }

    /// The registry (to build a surface over).
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The notes as they are now.
    pub fn snapshot(&self) -> Notes {
        lock(&self.notes).clone()
    }

    /// Replaces the notes (to grade a scripted state in tests).
    pub fn replace(&self, notes: Notes) {
        *lock(&self.notes) = notes;
    }

    fn register(&self) -> Result<(), CoreError> {
        let r = &self.registry;
        let write = WriteCapability::new(NOTES_WRITE, "Create and edit notes");
        let archive = WriteCapability::new(NOTES_ARCHIVE, "Archive notes");
        r.declare(write.clone())?;
        r.declare(archive.clone())?;
        let ids = self.ids;
        let id_prop = match ids {
            IdStyle::Number => {
                json!({"type": "integer", "description": "The note's note_id, from search_notes or list_notes"})
            }
            IdStyle::Uuid => {
                json!({"type": "string", "description": "The note's note_id (a uuid), from search_notes or list_notes"})
            }
        };

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("search_notes")
                .description("Find notes whose title or text contains the query. Returns each note's note_id.")
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"query": {"type": "string", "description": "Words to look for"}}, "required": ["query"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let q = norm(a["query"].as_str().unwrap_or(""));
                            let notes = lock(&n);
                            let hits: Vec<String> = notes
                                .iter()
                                .filter(|(_, note)| !note.archived)
                                .filter(|(_, note)| {
                                    q.split_whitespace().any(|w| {
                                        norm(&note.title).contains(w) || norm(&note.body).contains(w)
                                    })
                                })
                                .map(|(id, note)| line(ids, *id, note))
                                .collect();
                            Ok(ToolOutput::text(if hits.is_empty() {
                                format!("No note matches \"{q}\".")
                            } else {
                                hits.join("\n")
                            }))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("list_notes")
                .description("List every note with its note_id, title, priority and tags.")
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {}, "additionalProperties": false}),
                    move |_, _| {
                        let n = n.clone();
                        async move {
                            let notes = lock(&n);
                            let all: Vec<String> = notes
                                .iter()
                                .filter(|(_, note)| !note.archived)
                                .map(|(id, note)| line(ids, *id, note))
                                .collect();
                            Ok(ToolOutput::text(all.join("\n")))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("get_note")
                .description("Read one note's full text by its note_id.")
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"note_id": id_prop}, "required": ["note_id"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let notes = lock(&n);
                            let id = id_arg(ids, &a, &notes)?;
                            let note = notes.get(&id).ok_or_else(|| no_note(ids, id))?;
                            Ok(ToolOutput::text(format!("{}\nText: {}", line(ids, id, note), note.body)))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("count_notes")
                .description("Count the notes, optionally only those with a tag.")
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"tag": {"type": "string", "description": "Only notes with this tag"}}, "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let tag = a["tag"].as_str().map(norm).filter(|t| !t.is_empty());
                            let notes = lock(&n);
                            let count = notes
                                .values()
                                .filter(|note| !note.archived)
                                .filter(|note| tag.as_ref().is_none_or(|t| note.tags.iter().any(|x| norm(x) == *t)))
                                .count();
                            Ok(ToolOutput::text(format!("{count} notes")))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("add_note")
                .description("Create a new note.")
                .write(write.clone())
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"title": {"type": "string", "minLength": 1}, "body": {"type": "string"}}, "required": ["title", "body"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let mut notes = lock(&n);
                            let id = notes.keys().next_back().map_or(1, |k| k + 1);
                            let note = Note::new(
                                a["title"].as_str().unwrap_or(""),
                                a["body"].as_str().unwrap_or(""),
                                3,
                                &[],
                            );
                            let text = format!("Added {}", line(ids, id, &note));
                            notes.insert(id, note);
                            Ok(ToolOutput::text(text))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("set_priority")
                .description("Set a note's priority, from 1 (low) to 5 (high).")
                .write(write.clone())
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"note_id": id_prop, "priority": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["note_id", "priority"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let p = a["priority"].as_u64().and_then(|p| u8::try_from(p).ok()).unwrap_or(3);
                            let mut notes = lock(&n);
                            let id = id_arg(ids, &a, &notes)?;
                            let note = notes.get_mut(&id).ok_or_else(|| no_note(ids, id))?;
                            note.priority = p;
                            Ok(ToolOutput::text(format!("Updated {}", line(ids, id, note))))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("add_tag")
                .description("Add one tag to a note.")
                .write(write.clone())
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"note_id": id_prop, "tag": {"type": "string", "minLength": 1}}, "required": ["note_id", "tag"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let tag = a["tag"].as_str().unwrap_or("").trim().to_string();
                            let mut notes = lock(&n);
                            let id = id_arg(ids, &a, &notes)?;
                            let note = notes.get_mut(&id).ok_or_else(|| no_note(ids, id))?;
                            if !note.tags.iter().any(|t| norm(t) == norm(&tag)) {
                                note.tags.push(tag);
                            }
                            Ok(ToolOutput::text(format!("Updated {}", line(ids, id, note))))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("rename_note")
                .description("Change a note's title.")
                .write(write)
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"note_id": id_prop, "title": {"type": "string", "minLength": 1}}, "required": ["note_id", "title"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let mut notes = lock(&n);
                            let id = id_arg(ids, &a, &notes)?;
                            let note = notes.get_mut(&id).ok_or_else(|| no_note(ids, id))?;
                            note.title = a["title"].as_str().unwrap_or("").to_string();
                            Ok(ToolOutput::text(format!("Updated {}", line(ids, id, note))))
                        }
                    },
                ),
        )?;

        let n = self.notes.clone();
        r.register(
            ToolBuilder::new("archive_note")
                .description("Archive a note (hide it from lists).")
                .write(archive)
                .small_model_safe()
                .raw_handler(
                    json!({"type": "object", "properties": {"note_id": id_prop}, "required": ["note_id"], "additionalProperties": false}),
                    move |a, _| {
                        let n = n.clone();
                        async move {
                            let mut notes = lock(&n);
                            let id = id_arg(ids, &a, &notes)?;
                            let note = notes.get_mut(&id).ok_or_else(|| no_note(ids, id))?;
                            note.archived = true;
                            Ok(ToolOutput::text(format!("Archived note_id {}", ids.show(id))))
                        }
                    },
                ),
        )?;

        r.refuse(
            "delete_note",
            "Deleting notes is not offered to the assistant; the user can delete a note in the app.",
        )?;
        Ok(())
    }
}
