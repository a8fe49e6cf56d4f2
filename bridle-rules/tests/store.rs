//! The review queue, decisions, conflicts, scope tickets, vendor sourcing and the change log,
//! on a real data directory with a real SQLite file and, with the `postgres` feature, on a real
//! PostgreSQL database of a throwaway cluster (every test body runs on both).

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

#[cfg(feature = "postgres")]
#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use std::path::Path;

#[cfg(feature = "postgres")]
use bridle_rules::db::postgres::PgDatabase;
use bridle_rules::{
    AgentCatalog, ChangeRequest, CustomPattern, Origin, ProposalStatus, QueueFilter, RulesDocument,
    RulesError, RulesStore, Severity, Source,
};

/// Which database a test runs on.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// A data folder and, for PostgreSQL, the test's own database.
struct Fixture {
    dir: tempfile::TempDir,
    #[cfg(feature = "postgres")]
    database: Option<String>,
}

impl Fixture {
    fn new(backend: Backend) -> Self {
        #[cfg(not(feature = "postgres"))]
        let Backend::Sqlite = backend;
        Self {
            dir: tempfile::tempdir().unwrap(),
            #[cfg(feature = "postgres")]
            database: match backend {
                Backend::Sqlite => None,
                Backend::Postgres => Some(pg_cluster::PgCluster::shared().create_database()),
            },
        }
    }

    /// The data folder.
    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Opens a store on the fixture's database with `data_dir` as its data folder.
    fn open_at(&self, data_dir: &Path) -> RulesStore {
        #[cfg(feature = "postgres")]
        if let Some(name) = &self.database {
            let db = PgDatabase::connect(&pg_cluster::PgCluster::shared().settings(name)).unwrap();
            return RulesStore::open_postgres(data_dir, AgentCatalog::builtin(), db).unwrap();
        }
        RulesStore::open(data_dir, AgentCatalog::builtin()).unwrap()
    }

    /// Runs SQL on the fixture's database by hand, as another build or a person would.
    fn sql(&self, statements: &str) {
        #[cfg(feature = "postgres")]
        if let Some(name) = &self.database {
            let db = PgDatabase::connect(&pg_cluster::PgCluster::shared().settings(name)).unwrap();
            db.client().unwrap().batch(statements).unwrap();
            return;
        }
        rusqlite::Connection::open(self.path().join("bridle.db"))
            .unwrap()
            .execute_batch(statements)
            .unwrap();
    }

    /// Another handle on the same database: another process on the same data folder
    /// (SQLite), or another replica with a data folder of its own (PostgreSQL).
    fn open_another(&self) -> RulesStore {
        #[cfg(feature = "postgres")]
        if self.database.is_some() {
            let replica = tempfile::tempdir().unwrap().keep();
            return self.open_at(&replica);
        }
        self.open_at(self.path())
    }
}

fn store(backend: Backend) -> (Fixture, RulesStore) {
    let fx = Fixture::new(backend);
    let store = fx.open_at(fx.path());
    let mut doc = RulesDocument::new("Shop");
    doc.permissions.insert("claude".into(), Default::default());
    store.create("shop", &doc, "alice").unwrap();
    (fx, store)
}

/// Runs each named test body on SQLite and, with the `postgres` feature, on PostgreSQL.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(super::Backend::Sqlite) })*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(#[test] fn $name() { super::$name(super::Backend::Postgres) })*
        }
    };
}

on_every_backend!(
    proposals_wait_for_a_person_and_carry_provenance,
    rejection_records_why_and_changes_nothing,
    stale_revisions_are_conflicts_and_lose_nothing,
    bad_proposals_are_refused_with_reasons,
    patterns_are_proposed_and_promoted,
    vendor_sourcing_queues_once,
    scope_tickets_are_decided_by_people,
    concurrent_approvals_never_lose_an_update,
    concurrent_approvals_of_one_proposal_have_one_winner,
    suggestions_in_agent_profiles_are_queued_for_review_once,
    earlier_revisions_are_kept_and_a_preview_writes_nothing,
    a_flood_of_alike_vendor_sentences_is_capped_with_distinct_ids,
    proposals_are_bounded_in_size_and_in_number,
    scope_tickets_are_bounded_in_size_and_in_number,
    pending_counts_agree_with_the_listings,
    control_characters_of_a_vendor_page_never_reach_a_proposal,
    a_retried_guardrail_proposal_is_queued_once,
    one_proposer_cannot_fill_a_project_queue,
    an_unreadable_row_is_left_out_of_listings_and_named_when_read,
    a_queue_page_is_the_listing_filtered_and_cut,
    vendor_sourcing_cannot_fill_a_project_past_its_limit,
    a_change_that_is_not_json_fails_no_proposal,
    a_broken_stored_document_is_repaired_from_a_kept_revision,
);

fn guardrail(id: &str) -> ChangeRequest {
    ChangeRequest::Guardrail {
        id: id.into(),
        statement: format!("Statement for {id}."),
        severity: Severity::HardInstruction,
        applies_to: vec!["all_agents".into()],
    }
}

fn proposals_wait_for_a_person_and_carry_provenance(backend: Backend) {
    let (dir, store) = store(backend);
    let origin = Origin::agent("claude", Some("sess-1".into()));
    let p = store
        .propose("shop", &origin, &guardrail("tests-first"), None)
        .unwrap();
    assert_eq!(p.status, ProposalStatus::Pending);
    // Nothing auto-merges.
    assert!(store.load("shop").unwrap().document.guardrails.is_empty());
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 1);

    let approved = store.approve(p.id, "alice").unwrap();
    assert_eq!(approved.status, ProposalStatus::Approved);
    assert_eq!(approved.applied_revision, Some(2));
    let doc = store.load("shop").unwrap().document;
    assert_eq!(doc.revision, 2);
    let g = doc.guardrail("tests-first").unwrap();
    assert_eq!(g.provenance.source, Source::Agent);
    assert_eq!(g.provenance.proposed_by.as_deref(), Some("claude"));
    assert_eq!(g.provenance.agent_session.as_deref(), Some("sess-1"));
    assert_eq!(g.provenance.approved_by.as_deref(), Some("alice"));
    assert_eq!(g.provenance.proposal, Some(p.id));
    assert!(g.provenance.approved_at.as_deref().unwrap().ends_with('Z'));
    assert!(store.queue(Some("shop"), false).unwrap().is_empty());

    // The file on disk is plain YAML with the guardrail.
    let text = std::fs::read_to_string(dir.path().join("projects/shop.yaml")).unwrap();
    assert!(text.contains("id: tests-first"));

    // Deciding twice is refused.
    assert_eq!(
        store.approve(p.id, "bob").unwrap_err().code(),
        "already_decided"
    );
    assert_eq!(
        store.reject(p.id, "bob", "no").unwrap_err().code(),
        "already_decided"
    );

    let log = store.changes(Some("shop"), 0).unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].source, Source::User);
    assert_eq!(log[1].source, Source::Agent);
    assert_eq!(log[1].actor, "alice");
    assert_eq!(log[1].proposal_id, Some(p.id));
    assert_eq!(store.last_change_id().unwrap(), log[1].id);
}

fn rejection_records_why_and_changes_nothing(backend: Backend) {
    let (_dir, store) = store(backend);
    let p = store
        .propose("shop", &Origin::agent("codex", None), &guardrail("x"), None)
        .unwrap();
    assert_eq!(
        store.reject(p.id, "alice", " ").unwrap_err().code(),
        "proposal_rejected"
    );
    let r = store.reject(p.id, "alice", "too vague").unwrap();
    assert_eq!(r.status, ProposalStatus::Rejected);
    assert_eq!(r.decision_note.as_deref(), Some("too vague"));
    assert_eq!(store.load("shop").unwrap().document.revision, 1);
    assert_eq!(store.queue(None, true).unwrap().len(), 1);
    assert_eq!(store.changes(None, 0).unwrap().len(), 1);
}

fn stale_revisions_are_conflicts_and_lose_nothing(backend: Backend) {
    let (_dir, store) = store(backend);
    let base = store.load("shop").unwrap().document;
    // Two people edit revision 1.
    let mut first = base.clone();
    first.project.overview = "first".into();
    let mut second = base.clone();
    second.project.overview = "second".into();
    assert_eq!(
        store
            .save_edit("shop", &first, 1, "alice", "overview")
            .unwrap(),
        2
    );
    let e = store
        .save_edit("shop", &second, 1, "bob", "overview")
        .unwrap_err();
    assert!(
        matches!(
            e,
            RulesError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        store.load("shop").unwrap().document.project.overview,
        "first"
    );

    // An agent's update against an old revision is refused when proposed...
    let update = ChangeRequest::UpdateProject {
        overview: Some("agent".into()),
        stack: None,
        conventions: None,
    };
    let origin = Origin::agent("claude", None);
    assert_eq!(
        store
            .propose("shop", &origin, &update, Some(1))
            .unwrap_err()
            .code(),
        "revision_conflict"
    );
    // ...and when the document moved on while it waited in the queue.
    let p = store.propose("shop", &origin, &update, Some(2)).unwrap();
    let mut third = store.load("shop").unwrap().document;
    third.project.stack = vec!["Rust".into()];
    store
        .save_edit("shop", &third, 2, "alice", "stack")
        .unwrap();
    assert_eq!(
        store.approve(p.id, "alice").unwrap_err().code(),
        "revision_conflict"
    );
    // The proposal is still there to reject or re-propose; the document kept both edits.
    assert_eq!(
        store.proposal(p.id).unwrap().status,
        ProposalStatus::Pending
    );
    let doc = store.load("shop").unwrap().document;
    assert_eq!(doc.project.overview, "first");
    assert_eq!(doc.project.stack, ["Rust"]);

    // A fresh proposal applies.
    let p = store.propose("shop", &origin, &update, Some(3)).unwrap();
    store.approve(p.id, "alice").unwrap();
    assert_eq!(
        store.load("shop").unwrap().document.project.overview,
        "agent"
    );
}

fn bad_proposals_are_refused_with_reasons(backend: Backend) {
    let (_dir, store) = store(backend);
    let o = Origin::agent("claude", None);
    assert_eq!(
        store
            .propose("nope", &o, &guardrail("a"), None)
            .unwrap_err()
            .code(),
        "unknown_project"
    );
    assert_eq!(
        store
            .propose("../etc", &o, &guardrail("a"), None)
            .unwrap_err()
            .code(),
        "invalid_name"
    );
    assert_eq!(
        store
            .propose("shop", &o, &guardrail("Bad Id"), None)
            .unwrap_err()
            .code(),
        "invalid_name"
    );
    let unknown_agent = ChangeRequest::Guardrail {
        id: "a".into(),
        statement: "s".into(),
        severity: Severity::Guidance,
        applies_to: vec!["hal9000".into()],
    };
    assert_eq!(
        store
            .propose("shop", &o, &unknown_agent, None)
            .unwrap_err()
            .code(),
        "unknown_agent"
    );
    let both = ChangeRequest::Pattern {
        standard: Some("MVC".into()),
        custom: Some(CustomPattern {
            name: "x".into(),
            description: String::new(),
            example_repos: vec![],
        }),
    };
    assert_eq!(
        store.propose("shop", &o, &both, None).unwrap_err().code(),
        "proposal_rejected"
    );

    // The same proposal twice is queued once (see a_retried_guardrail_proposal_is_queued_once);
    // once approved, the id is taken.
    let p1 = store.propose("shop", &o, &guardrail("same"), None).unwrap();
    let p2 = store.propose("shop", &o, &guardrail("same"), None).unwrap();
    assert_eq!(p2.id, p1.id);
    store.approve(p1.id, "alice").unwrap();
    assert_eq!(
        store
            .propose("shop", &o, &guardrail("same"), None)
            .unwrap_err()
            .code(),
        "proposal_rejected"
    );
    assert_eq!(store.approve(999, "alice").unwrap_err().code(), "not_found");
}

fn patterns_are_proposed_and_promoted(backend: Backend) {
    let (_dir, store) = store(backend);
    let o = Origin::agent("claude", None);
    let p = store
        .propose(
            "shop",
            &o,
            &ChangeRequest::Pattern {
                standard: Some("hexagonal".into()),
                custom: None,
            },
            None,
        )
        .unwrap();
    store.approve(p.id, "alice").unwrap();
    assert_eq!(
        store.load("shop").unwrap().document.patterns.standard,
        ["hexagonal"]
    );
}

fn vendor_sourcing_queues_once(backend: Backend) {
    let (dir, store) = store(backend);
    let guidance = "# Claude Code best practices\n\n- Always run the tests before you commit.\n- Keep CLAUDE.md short and specific.\n\nSome prose without advice.\n";
    let src = dir.path().join("vendor.md");
    std::fs::write(&src, guidance).unwrap();
    let source_ref = src.display().to_string();
    let first = store
        .queue_vendor_guidance("shop", "claude", &source_ref, guidance)
        .unwrap();
    assert_eq!(first.queued.len(), 2);
    let again = store
        .queue_vendor_guidance("shop", "claude", &source_ref, guidance)
        .unwrap();
    assert!(again.queued.is_empty());
    assert_eq!(again.skipped, 2);
    let queue = store.queue(Some("shop"), false).unwrap();
    assert_eq!(queue.len(), 2);
    assert_eq!(queue[0].origin.source, Source::Vendor);
    assert_eq!(
        queue[0].origin.source_ref.as_deref(),
        Some(source_ref.as_str())
    );

    // Approved, it becomes policy with vendor provenance; a re-run still adds nothing.
    store.approve(queue[0].id, "alice").unwrap();
    let doc = store.load("shop").unwrap().document;
    let g = &doc.guardrails[0];
    assert_eq!(g.provenance.source, Source::Vendor);
    assert_eq!(g.applies_to, ["claude"]);
    assert_eq!(g.severity, Severity::Guidance);
    let third = store
        .queue_vendor_guidance("shop", "claude", &source_ref, guidance)
        .unwrap();
    assert!(third.queued.is_empty());
    let log = store.changes(Some("shop"), 0).unwrap();
    assert_eq!(log.last().unwrap().source, Source::Vendor);

    assert_eq!(
        store
            .queue_vendor_guidance("shop", "hal", "x", guidance)
            .unwrap_err()
            .code(),
        "unknown_agent"
    );
}

fn scope_tickets_are_decided_by_people(backend: Backend) {
    let (_dir, store) = store(backend);
    let t = store
        .request_scope(
            "shop",
            "claude",
            Some("s1"),
            "Rename the db module",
            "it blocks the task",
        )
        .unwrap();
    assert_eq!(t.status, "pending");
    assert_eq!(store.scope_tickets(false).unwrap().len(), 1);
    let d = store
        .decide_scope(t.id, true, "alice", Some("go ahead"))
        .unwrap();
    assert_eq!(d.status, "approved");
    assert_eq!(d.decided_by.as_deref(), Some("alice"));
    assert_eq!(
        store
            .decide_scope(t.id, false, "bob", None)
            .unwrap_err()
            .code(),
        "already_decided"
    );
    assert!(store.scope_tickets(false).unwrap().is_empty());
    assert_eq!(
        store
            .request_scope("nope", "claude", None, "x", "y")
            .unwrap_err()
            .code(),
        "unknown_project"
    );
    assert_eq!(
        store
            .request_scope("shop", "claude", None, " ", "y")
            .unwrap_err()
            .code(),
        "proposal_rejected"
    );
    assert_eq!(store.scope_ticket(77).unwrap_err().code(), "not_found");
}

#[test]
fn an_old_document_on_disk_is_upgraded_in_place() {
    let (dir, store) = store(Backend::Sqlite);
    let v1 = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shop-v1.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("projects/legacy.yaml"), v1).unwrap();
    assert_eq!(store.projects().unwrap(), ["legacy", "shop"]);
    assert_eq!(store.load("legacy").unwrap().migrated_from, Some(1));
    assert_eq!(store.upgrade("legacy", "alice").unwrap(), Some(1));
    let text = std::fs::read_to_string(dir.path().join("projects/legacy.yaml")).unwrap();
    assert!(
        text.starts_with("schema_version: 2\nrevision: 1\n"),
        "{text}"
    );
    assert_eq!(store.load("legacy").unwrap().migrated_from, None);
    assert_eq!(store.upgrade("legacy", "alice").unwrap(), None);
}

#[test]
fn a_broken_file_is_reported_and_left_alone() {
    let (dir, store) = store(Backend::Sqlite);
    let path = dir.path().join("projects/shop.yaml");
    std::fs::write(&path, "schema_version: 2\nproject: {name: x\n").unwrap();
    let e = store.load("shop").unwrap_err();
    assert_eq!(e.code(), "parse_error");
    assert!(e.to_string().contains("shop.yaml"));
    let o = Origin::agent("claude", None);
    assert_eq!(
        store
            .propose("shop", &o, &guardrail("a"), None)
            .unwrap_err()
            .code(),
        "parse_error"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "schema_version: 2\nproject: {name: x\n"
    );
}

fn concurrent_approvals_never_lose_an_update(backend: Backend) {
    let (dir, store) = store(backend);
    let o = Origin::agent("claude", None);
    let ids: Vec<u64> = (0..8)
        .map(|i| {
            store
                .propose("shop", &o, &guardrail(&format!("g{i}")), None)
                .unwrap()
                .id
        })
        .collect();
    let handles: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let s = dir.open_another();
            std::thread::spawn(move || {
                s.approve(id, "alice").unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let doc = store.load("shop").unwrap().document;
    assert_eq!(doc.guardrails.len(), 8);
    assert_eq!(doc.revision, 9);
}

fn suggestions_in_agent_profiles_are_queued_for_review_once(backend: Backend) {
    let (_dir, store) = store(backend);
    let mut doc = store.load("shop").unwrap().document;
    let rev = doc.revision;
    doc.agent_profiles.insert(
        "claude".into(),
        bridle_rules::AgentProfile {
            capabilities: vec![],
            instruction_format: None,
            vendor_guardrail_suggestions: vec![bridle_rules::VendorSuggestion {
                id: "claude-plan-first".into(),
                statement: "Use plan mode for multi-file changes.".into(),
                source_ref: Some("https://docs.example.invalid/claude".into()),
            }],
        },
    );
    store
        .save_edit("shop", &doc, rev, "alice", "profile")
        .unwrap();
    let first = store.queue_profile_suggestions("shop").unwrap();
    assert_eq!(first.queued.len(), 1);
    assert_eq!(store.queue_profile_suggestions("shop").unwrap().skipped, 1);
    let p = store.proposal(first.queued[0]).unwrap();
    assert_eq!(p.origin.source, Source::Vendor);
    assert_eq!(
        p.origin.source_ref.as_deref(),
        Some("https://docs.example.invalid/claude")
    );
    store.approve(p.id, "alice").unwrap();
    let doc = store.load("shop").unwrap().document;
    // Promoted into policy with vendor provenance, and no longer a pending suggestion.
    let g = doc.guardrail("claude-plan-first").unwrap();
    assert_eq!(g.provenance.source, Source::Vendor);
    assert_eq!(g.applies_to, ["claude"]);
    assert!(
        doc.agent_profiles["claude"]
            .vendor_guardrail_suggestions
            .is_empty()
    );
}

fn earlier_revisions_are_kept_and_a_preview_writes_nothing(backend: Backend) {
    let (_dir, store) = store(backend);
    let p = store
        .propose(
            "shop",
            &Origin::agent("claude", None),
            &guardrail("no-force-push"),
            None,
        )
        .unwrap();
    let preview = store.preview(p.id, "alice").unwrap();
    assert_eq!(preview.revision, 2);
    assert!(preview.guardrail("no-force-push").is_some());
    // Nothing was written.
    assert_eq!(store.load("shop").unwrap().document.revision, 1);
    assert!(store.document_at("shop", 2).is_err());

    store.approve(p.id, "alice").unwrap();
    let first = store.document_at("shop", 1).unwrap();
    assert_eq!(first.revision, 1);
    assert!(first.guardrail("no-force-push").is_none());
    assert!(
        store
            .document_at("shop", 2)
            .unwrap()
            .guardrail("no-force-push")
            .is_some()
    );
    match store.document_at("shop", 9) {
        Err(RulesError::NotFound { kind, .. }) => assert_eq!(kind, "revision"),
        other => panic!("expected not found, got {other:?}"),
    }
    // A decided proposal has nothing to preview and cannot be approved again.
    assert!(matches!(
        store.preview(p.id, "bob"),
        Err(RulesError::AlreadyDecided { .. })
    ));
    assert!(matches!(
        store.approve(p.id, "bob"),
        Err(RulesError::AlreadyDecided { .. })
    ));
}

/// Several replicas (or processes) approve the same proposal at once: exactly one wins, the
/// others are told it was decided, and the document gains it once.
fn concurrent_approvals_of_one_proposal_have_one_winner(backend: Backend) {
    let (dir, store) = store(backend);
    let p = store
        .propose(
            "shop",
            &Origin::agent("claude", None),
            &guardrail("once"),
            None,
        )
        .unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let s = dir.open_another();
            std::thread::spawn(move || s.approve(p.id, &format!("person-{i}")))
        })
        .collect();
    let outcomes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let won: Vec<_> = outcomes.iter().filter(|o| o.is_ok()).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    for lost in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert_eq!(lost.code(), "already_decided", "{lost}");
    }
    let doc = store.load("shop").unwrap().document;
    assert_eq!(doc.revision, 2);
    assert_eq!(doc.guardrails.iter().filter(|g| g.id == "once").count(), 1);
    assert_eq!(store.changes(Some("shop"), 0).unwrap().len(), 2);
}

/// A hand-edited `revision` the database cannot store (it keeps revisions as signed 64-bit
/// integers) is refused with a clear error, never wrapped round to an old revision, and no
/// write goes through: not the file, not the change log, not the proposal.
#[test]
fn a_hand_edited_revision_past_the_database_range_is_refused() {
    let (dir, store) = store(Backend::Sqlite);
    let origin = Origin::agent("claude", None);
    let waiting = store
        .propose("shop", &origin, &guardrail("waiting"), None)
        .unwrap();
    let path = dir.path().join("projects/shop.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\nrevision: 1\n"), "{text}");
    let changes = store.changes(Some("shop"), 0).unwrap().len();

    let nothing_written = |edited: &str| {
        assert_eq!(std::fs::read_to_string(&path).unwrap(), edited);
        assert_eq!(store.changes(Some("shop"), 0).unwrap().len(), changes);
        assert_eq!(
            store.proposal(waiting.id).unwrap().status,
            ProposalStatus::Pending
        );
    };

    // Beyond what the database stores: the document does not load.
    let edited = text.replace("\nrevision: 1\n", "\nrevision: 18446744073709551615\n");
    std::fs::write(&path, &edited).unwrap();
    let e = store.load("shop").unwrap_err();
    assert_eq!(e.code(), "invalid_document", "{e}");
    assert!(e.to_string().contains("revision_out_of_range"), "{e}");
    assert_eq!(
        store.approve(waiting.id, "alice").unwrap_err().code(),
        "invalid_document"
    );
    let mut doc = RulesDocument::new("Shop");
    doc.permissions.insert("claude".into(), Default::default());
    assert_eq!(
        store
            .save_edit("shop", &doc, u64::MAX, "alice", "edit")
            .unwrap_err()
            .code(),
        "invalid_document"
    );
    assert_eq!(
        store
            .propose("shop", &origin, &guardrail("other"), None)
            .unwrap_err()
            .code(),
        "invalid_document"
    );
    nothing_written(&edited);

    // The largest revision stored: it loads, but no change can follow it.
    let edited = text.replace("\nrevision: 1\n", "\nrevision: 9223372036854775807\n");
    std::fs::write(&path, &edited).unwrap();
    assert_eq!(
        store.load("shop").unwrap().document.revision,
        i64::MAX as u64
    );
    for e in [
        store.approve(waiting.id, "alice").unwrap_err(),
        store.preview(waiting.id, "alice").unwrap_err(),
        store
            .save_edit("shop", &doc, i64::MAX as u64, "alice", "edit")
            .unwrap_err(),
    ] {
        assert_eq!(e.code(), "invalid_document", "{e}");
        assert!(e.to_string().contains("revision_out_of_range"), "{e}");
    }
    nothing_written(&edited);
}

/// A text of thousands of sentences that share their first six words queues the first
/// `MAX_CANDIDATES_PER_PAGE` with distinct ids (the next free suffix of their common base),
/// reports the rest as skipped, and a later text continues the numbering past ids that are
/// queued or already policy.
fn a_flood_of_alike_vendor_sentences_is_capped_with_distinct_ids(backend: Backend) {
    use bridle_rules::vendor::MAX_CANDIDATES_PER_PAGE;
    let (_dir, store) = store(backend);
    let base = "claude-you-should-always-run-the-tests";
    let guardrail_id = |id: u64| match store.proposal(id).unwrap().change {
        ChangeRequest::Guardrail { id, .. } => id,
        other => panic!("not a guardrail: {other:?}"),
    };
    let flood: String = (0..3000)
        .map(|i| format!("You should always run the tests for module {i}. "))
        .collect();
    let report = store
        .queue_vendor_guidance("shop", "claude", "http://vendor.example/guide", &flood)
        .unwrap();
    assert_eq!(report.queued.len(), MAX_CANDIDATES_PER_PAGE);
    assert_eq!(report.over_limit, 3000 - MAX_CANDIDATES_PER_PAGE);
    assert_eq!(report.skipped, report.over_limit);
    let ids: Vec<String> = report.queued.iter().map(|id| guardrail_id(*id)).collect();
    let mut expected = vec![base.to_string()];
    expected.extend((2..=MAX_CANDIDATES_PER_PAGE).map(|n| format!("{base}-{n}")));
    assert_eq!(ids, expected);

    // One of them approved is policy; a similar id elsewhere is no collision.
    store.approve(report.queued[1], "alice").unwrap();
    store
        .propose(
            "shop",
            &Origin::agent("claude", None),
            &guardrail(&format!("{base}-extra")),
            None,
        )
        .unwrap();
    let more = store
        .queue_vendor_guidance(
            "shop",
            "claude",
            "http://vendor.example/guide",
            "You should always run the tests for packages too.",
        )
        .unwrap();
    assert_eq!(more.queued.len(), 1);
    assert_eq!(
        guardrail_id(more.queued[0]),
        format!("{base}-{}", MAX_CANDIDATES_PER_PAGE + 1)
    );
}

/// An agent cannot fill the review queue without end: a proposal's change is at most
/// `MAX_PROPOSAL_BYTES` of JSON, and a project holds at most `MAX_PENDING_PROPOSALS` waiting
/// for a person; past either, nothing is stored. A decision makes room again.
fn proposals_are_bounded_in_size_and_in_number(backend: Backend) {
    let (_dir, store) = store(backend);
    let o = Origin::agent("claude", None);
    let huge = ChangeRequest::Guardrail {
        id: "huge".into(),
        statement: "x".repeat(bridle_rules::MAX_PROPOSAL_BYTES),
        severity: Severity::Guidance,
        applies_to: vec!["all_agents".into()],
    };
    let err = store.propose("shop", &o, &huge, None).unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert!(store.queue(Some("shop"), true).unwrap().is_empty());

    // Many proposers (each within its own limit) fill the project.
    let mut first = None;
    for i in 0..bridle_rules::MAX_PENDING_PROPOSALS {
        let by = Origin::agent(
            format!("agent-{}", i / bridle_rules::MAX_PENDING_PER_PROPOSER),
            None,
        );
        let p = store
            .propose("shop", &by, &guardrail(&format!("g{i}")), None)
            .unwrap();
        first.get_or_insert(p.id);
    }
    let err = store
        .propose("shop", &o, &guardrail("one-more"), None)
        .unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert!(err.to_string().contains("waiting for review"), "{err}");
    assert_eq!(
        store.queue(Some("shop"), false).unwrap().len(),
        bridle_rules::MAX_PENDING_PROPOSALS
    );
    store.reject(first.unwrap(), "alice", "not now").unwrap();
    store
        .propose("shop", &o, &guardrail("one-more"), None)
        .unwrap();
}

/// Scope tickets are bounded as proposals are: at most `MAX_PROPOSAL_BYTES` of text, at most
/// `MAX_PENDING_PER_PROPOSER` of one agent and `MAX_PENDING_PROPOSALS` of one project waiting
/// (so one agent cannot lock the others out); a decision makes room again, and another
/// project's tickets are not counted.
fn scope_tickets_are_bounded_in_size_and_in_number(backend: Backend) {
    let (_dir, store) = store(backend);
    store
        .create("other", &RulesDocument::new("Other"), "alice")
        .unwrap();
    let huge = "x".repeat(bridle_rules::MAX_PROPOSAL_BYTES);
    for (action, reason, session) in [
        (huge.as_str(), "why", None),
        ("act", huge.as_str(), None),
        ("act", "why", Some(huge.as_str())),
    ] {
        let err = store
            .request_scope("shop", "claude", session, action, reason)
            .unwrap_err();
        assert_eq!(err.code(), "proposal_rejected", "{err}");
    }
    assert!(store.scope_tickets(true).unwrap().is_empty());

    // One agent fills its share; the others can still ask.
    let per_agent = bridle_rules::MAX_PENDING_PER_PROPOSER;
    let mut first = None;
    for i in 0..per_agent {
        let t = store
            .request_scope("shop", "claude", None, &format!("step {i}"), "why")
            .unwrap();
        first.get_or_insert(t.id);
    }
    let err = store
        .request_scope("shop", "claude", None, "one more", "why")
        .unwrap_err();
    assert_eq!(err.code(), "too_many_pending", "{err}");
    assert!(err.to_string().contains("`claude`"), "{err}");
    store
        .request_scope("shop", "codex", None, "mine", "why")
        .unwrap();
    store
        .decide_scope(first.unwrap(), false, "alice", None)
        .unwrap();
    store
        .request_scope("shop", "claude", None, "one more", "why")
        .unwrap();

    // The project's queue is full once enough agents have filled theirs.
    let mut pending = per_agent + 1;
    let mut agent = 0;
    while pending < bridle_rules::MAX_PENDING_PROPOSALS {
        let name = format!("agent-{agent}");
        let mine = if agent == 0 { per_agent - 1 } else { per_agent };
        for i in 0..mine.min(bridle_rules::MAX_PENDING_PROPOSALS - pending) {
            store
                .request_scope("shop", &name, None, &format!("step {i}"), "why")
                .unwrap();
            pending += 1;
        }
        agent += 1;
    }
    let err = store
        .request_scope("shop", "latecomer", None, "one more", "why")
        .unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert!(err.to_string().contains("waiting"), "{err}");
    store
        .request_scope("other", "claude", None, "elsewhere", "why")
        .unwrap();
}

/// With the files as the source of truth, an approval whose database write fails (here a
/// trigger refuses the change log's row, as a full disk would) leaves the project's file as it
/// was and the proposal pending: the file is written after every statement of the
/// transaction, not before them.
#[test]
fn an_approval_whose_database_write_fails_leaves_the_file_as_it_was() {
    let (_fx, store) = store(Backend::Sqlite);
    let o = Origin::agent("claude", None);
    let p = store.propose("shop", &o, &guardrail("g1"), None).unwrap();
    let file = store.project_path("shop").unwrap();
    let before = std::fs::read_to_string(&file).unwrap();
    let db = rusqlite::Connection::open(store.db_path()).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse BEFORE INSERT ON changes BEGIN SELECT RAISE(ABORT, 'the disk is full'); END;",
    )
    .unwrap();
    store.approve(p.id, "alice").unwrap_err();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    assert_eq!(
        store.proposal(p.id).unwrap().status,
        ProposalStatus::Pending
    );
    assert!(
        store
            .load("shop")
            .unwrap()
            .document
            .guardrail("g1")
            .is_none()
    );
    // Once the database takes the change, the approval goes through whole.
    db.execute_batch("DROP TRIGGER refuse;").unwrap();
    store.approve(p.id, "alice").unwrap();
    assert!(
        store
            .load("shop")
            .unwrap()
            .document
            .guardrail("g1")
            .is_some()
    );
}

/// `pending_counts` counts what `queue(None, false)` and `scope_tickets(false)` list, across
/// every project, as items are added and decided (approved, rejected, denied), and a decided
/// item stops counting on another handle on the same database too.
fn pending_counts_agree_with_the_listings(backend: Backend) {
    let (fx, store) = store(backend);
    store
        .create("other", &RulesDocument::new("Other"), "alice")
        .unwrap();
    let other_handle = fx.open_another();
    let agree = |store: &RulesStore| {
        let counts = store.pending_counts().unwrap();
        assert_eq!(
            counts.proposals,
            store.queue(None, false).unwrap().len() as u64,
            "{counts:?}"
        );
        assert_eq!(
            counts.scope_tickets,
            store.scope_tickets(false).unwrap().len() as u64,
            "{counts:?}"
        );
        counts
    };
    assert_eq!(agree(&store), bridle_rules::PendingCounts::default());

    let o = Origin::agent("claude", None);
    let mut proposals = Vec::new();
    let mut tickets = Vec::new();
    for project in ["shop", "other"] {
        for i in 0..3 {
            let p = store
                .propose(project, &o, &guardrail(&format!("{project}-g{i}")), None)
                .unwrap();
            proposals.push(p.id);
            let t = store
                .request_scope(project, "claude", None, &format!("step {i}"), "why")
                .unwrap();
            tickets.push(t.id);
        }
    }
    let counts = agree(&store);
    assert_eq!((counts.proposals, counts.scope_tickets), (6, 6));

    store.approve(proposals[0], "alice").unwrap();
    store.reject(proposals[4], "alice", "not now").unwrap();
    store.decide_scope(tickets[1], true, "alice", None).unwrap();
    other_handle
        .decide_scope(tickets[5], false, "bob", Some("no"))
        .unwrap();
    let counts = agree(&store);
    assert_eq!((counts.proposals, counts.scope_tickets), (4, 4));
    assert_eq!(agree(&other_handle), counts);

    // A refused proposal or ticket (unknown project) counts nowhere.
    assert!(store.propose("nope", &o, &guardrail("x"), None).is_err());
    assert!(
        store
            .request_scope("nope", "claude", None, "x", "y")
            .is_err()
    );
    assert_eq!(agree(&store), counts);
}

/// True when `text` holds a character a reviewer would not see or a terminal would act on:
/// a control character (line feeds and tabs aside), a bidirectional-text control, or a
/// Unicode tag character (invisible, read by models as the letters it mirrors).
fn hides_something(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && !matches!(c, '\n' | '\t'))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{e0000}'..='\u{e007f}')
    })
}

/// A vendor page is scraped text from any server: escape sequences, NUL, a lone carriage
/// return, bidirectional controls and tag characters in it are dropped or become spaces, so the statements
/// queued (and their excerpts in the ledger) hold only what a reviewer sees.
fn control_characters_of_a_vendor_page_never_reach_a_proposal(backend: Backend) {
    let (_dir, store) = store(backend);
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vendor-controls.html"),
    )
    .unwrap();
    let markdown = "- Always run the \u{1b}[31mlinter\u{1b}[0m before you push a branch.\n- Never paste\u{0} tokens into \u{202e}chat windows\u{202c} or issues.\n- You should write\rshort commit messages in the \u{2067}imperative\u{2069} mood.\u{e0049}\u{e0067}\u{e006e}\u{e006f}\u{e0072}\u{e0065}\n";
    for (source_ref, text, queued) in [("page.html", page.as_str(), 4), ("page.md", markdown, 3)] {
        let report = store
            .queue_vendor_guidance("shop", "claude", source_ref, text)
            .unwrap();
        assert_eq!(report.queued.len(), queued, "{source_ref}: {report:?}");
        for c in
            bridle_rules::vendor::extract(text, bridle_rules::vendor::DocumentFormat::sniff(text))
        {
            assert!(!hides_something(&c.statement), "{:?}", c.statement);
            assert!(!hides_something(&c.excerpt), "{:?}", c.excerpt);
        }
    }
    let statements: Vec<String> = store
        .queue(Some("shop"), false)
        .unwrap()
        .into_iter()
        .map(|p| match p.change {
            ChangeRequest::Guardrail { statement, .. } => statement,
            other => panic!("not a guardrail: {other:?}"),
        })
        .collect();
    for s in &statements {
        assert!(!hides_something(s), "{s:?}");
    }
    assert!(
        statements.contains(&"Never commit secrets or credentials to the repository.".to_string()),
        "{statements:?}"
    );
    assert!(
        statements
            .contains(&"You should keep CLAUDE.md short and specific for the agent.".to_string()),
        "{statements:?}"
    );
}

/// An agent that sends `propose_guardrail` again (a retry after a lost answer, from any replica
/// at once) gets the proposal already waiting, not a second one whose approval would then fail;
/// another guardrail under an id already waiting for review is refused, nothing queued.
fn a_retried_guardrail_proposal_is_queued_once(backend: Backend) {
    let (dir, store) = store(backend);
    let o = Origin::agent("claude", Some("s1".into()));
    let first = store.propose("shop", &o, &guardrail("g1"), None).unwrap();
    let retried = Origin::agent("claude", Some("s2".into()));
    let again = store
        .propose("shop", &retried, &guardrail("g1"), None)
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again, first);

    let handles: Vec<_> = (0..4)
        .map(|_| {
            let s = dir.open_another();
            std::thread::spawn(move || {
                s.propose(
                    "shop",
                    &Origin::agent("codex", None),
                    &guardrail("g2"),
                    None,
                )
                .unwrap()
                .id
            })
        })
        .collect();
    let ids: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(ids.iter().all(|&id| id == ids[0]), "{ids:?}");
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 2);

    let other = ChangeRequest::Guardrail {
        id: "g1".into(),
        statement: "Another statement under the same id.".into(),
        severity: Severity::Guidance,
        applies_to: vec!["all_agents".into()],
    };
    for origin in [&o, &Origin::agent("codex", None)] {
        let err = store.propose("shop", origin, &other, None).unwrap_err();
        assert_eq!(err.code(), "proposal_rejected", "{err}");
        assert!(
            err.to_string().contains(&format!("proposal {}", first.id)),
            "{err}"
        );
    }
    // The same guardrail from another proposer is another person's proposal of it: refused.
    let err = store
        .propose(
            "shop",
            &Origin::agent("codex", None),
            &guardrail("g1"),
            None,
        )
        .unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 2);

    store.approve(first.id, "alice").unwrap();
    store.approve(ids[0], "alice").unwrap();
    assert_eq!(store.load("shop").unwrap().document.guardrails.len(), 2);
    // Once decided, a new proposal of the id is refused as before (the guardrail exists).
    let err = store
        .propose("shop", &o, &guardrail("g1"), None)
        .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
}

/// One proposer (a prompt-injected agent, say) may keep at most `MAX_PENDING_PER_PROPOSER`
/// proposals of a project waiting, so it cannot fill the project's queue and lock out the other
/// agents and the vendor feed, whose items count under a proposer of their own.
fn one_proposer_cannot_fill_a_project_queue(backend: Backend) {
    let (_dir, store) = store(backend);
    let max = bridle_rules::MAX_PENDING_PER_PROPOSER;
    let claude = Origin::agent("claude", None);
    let mut first = None;
    for i in 0..max {
        let p = store
            .propose("shop", &claude, &guardrail(&format!("g{i}")), None)
            .unwrap();
        first.get_or_insert(p.id);
    }
    let err = store
        .propose("shop", &claude, &guardrail("one-more"), None)
        .unwrap_err();
    assert_eq!(err.code(), "too_many_pending", "{err}");
    assert!(err.to_string().contains("`claude`"), "{err}");
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), max);
    // A retry of one it has waiting is still answered with it.
    assert_eq!(
        store
            .propose("shop", &claude, &guardrail("g0"), None)
            .unwrap()
            .id,
        first.unwrap()
    );

    // Other agents and the vendor feed still get their changes queued.
    store
        .propose(
            "shop",
            &Origin::agent("codex", None),
            &guardrail("codex-1"),
            None,
        )
        .unwrap();
    let report = store
        .queue_vendor_guidance(
            "shop",
            "claude",
            "https://vendor.example/guide",
            "- Always run the tests before you commit.\n",
        )
        .unwrap();
    assert_eq!(report.queued.len(), 1);

    // A decision makes room for that proposer again.
    store.reject(first.unwrap(), "alice", "not now").unwrap();
    store
        .propose("shop", &claude, &guardrail("one-more"), None)
        .unwrap();

    // The vendor feed of one profile is held to the same limit, under its own name.
    for i in 1..max {
        let queued = store
            .queue_vendor_statement(
                "shop",
                "claude",
                "https://vendor.example/guide",
                &format!("Always run check number {i} before you commit."),
            )
            .unwrap();
        assert!(queued.is_some(), "{i}");
    }
    let err = store
        .queue_vendor_statement(
            "shop",
            "claude",
            "https://vendor.example/guide",
            "Never push on a Friday afternoon to the main branch.",
        )
        .unwrap_err();
    assert_eq!(err.code(), "too_many_pending", "{err}");
    assert!(err.to_string().contains("`vendor:claude`"), "{err}");
    // A statement queued before is still simply skipped.
    assert_eq!(
        store
            .queue_vendor_statement(
                "shop",
                "claude",
                "https://vendor.example/guide",
                "Always run check number 1 before you commit."
            )
            .unwrap(),
        None
    );
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 2 * max + 1);
}

/// A proposal this build cannot read (its change of a kind a newer build added, a status it does
/// not know: another build shares the database) is left out of the listings, which go on, and
/// reading or deciding it is `unreadable_record`, never taken for a pending proposal. A scope
/// ticket likewise (SQLite, whose columns take any type; PostgreSQL's cannot hold one).
fn an_unreadable_row_is_left_out_of_listings_and_named_when_read(backend: Backend) {
    let (dir, store) = store(backend);
    let o = Origin::agent("claude", None);
    let ok = store.propose("shop", &o, &guardrail("g1"), None).unwrap();
    let newer = store.propose("shop", &o, &guardrail("g2"), None).unwrap();
    let unknown_status = store.propose("shop", &o, &guardrail("g3"), None).unwrap();
    let t1 = store
        .request_scope("shop", "claude", None, "act", "why")
        .unwrap();
    let t2 = store
        .request_scope("shop", "claude", None, "act 2", "why")
        .unwrap();
    dir.sql(&format!(
        "UPDATE proposals SET change = '{{\"kind\":\"rename_project\",\"to\":\"secret-plan\"}}' WHERE id = {};
         UPDATE proposals SET status = 'superseded' WHERE id = {};",
        newer.id, unknown_status.id
    ));
    if matches!(backend, Backend::Sqlite) {
        dir.sql(&format!(
            "UPDATE scope_requests SET action = x'ff00' WHERE id = {}",
            t2.id
        ));
    }

    for include_decided in [false, true] {
        let ids: Vec<u64> = store
            .queue(Some("shop"), include_decided)
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, [ok.id], "include_decided {include_decided}");
        assert_eq!(store.queue(None, include_decided).unwrap().len(), 1);
    }
    for id in [newer.id, unknown_status.id] {
        for err in [
            store.proposal(id).unwrap_err(),
            store.approve(id, "alice").unwrap_err(),
            store.reject(id, "alice", "no").unwrap_err(),
        ] {
            assert_eq!(err.code(), "unreadable_record", "{err}");
            assert!(
                err.to_string().contains(&format!("proposal `{id}`")),
                "{err}"
            );
            assert!(!err.to_string().contains("secret-plan"), "{err}");
        }
    }
    assert_eq!(store.load("shop").unwrap().document.guardrails.len(), 0);

    let tickets: Vec<u64> = store
        .scope_tickets(true)
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    if matches!(backend, Backend::Sqlite) {
        assert_eq!(tickets, [t1.id]);
        let err = store.scope_ticket(t2.id).unwrap_err();
        assert_eq!(err.code(), "unreadable_record", "{err}");
        assert!(
            err.to_string()
                .contains(&format!("scope ticket `{}`", t2.id)),
            "{err}"
        );
    } else {
        assert_eq!(tickets, [t1.id, t2.id]);
    }
    store.approve(ok.id, "alice").unwrap();
}

/// `queue_page` answers what filtering and cutting `queue` would, page by page, reading only
/// the page's rows: an unreadable row is passed over (the page is filled from the rows after
/// it), and a cursor past every id is an empty last page.
fn a_queue_page_is_the_listing_filtered_and_cut(backend: Backend) {
    let (dir, store) = store(backend);
    store
        .create("other", &RulesDocument::new("Other"), "alice")
        .unwrap();
    let claude = Origin::agent("claude", None);
    let codex = Origin::agent("codex", None);
    let mut ids = Vec::new();
    for i in 0..9 {
        let (project, origin) = match i % 3 {
            0 => ("shop", &claude),
            1 => ("shop", &codex),
            _ => ("other", &claude),
        };
        ids.push(
            store
                .propose(project, origin, &guardrail(&format!("g{i}")), None)
                .unwrap()
                .id,
        );
    }
    store
        .queue_vendor_guidance(
            "shop",
            "claude",
            "guide.md",
            "- Always run the tests before you commit.\n",
        )
        .unwrap();
    store.approve(ids[0], "alice").unwrap();
    store.reject(ids[4], "alice", "no").unwrap();
    dir.sql(&format!(
        "UPDATE proposals SET change = '{{\"kind\":\"newer\"}}' WHERE id IN ({}, {})",
        ids[1], ids[2]
    ));
    if matches!(backend, Backend::Sqlite) {
        // A column SQLite holds with a type this build does not read.
        dir.sql(&format!(
            "UPDATE proposals SET summary = x'ff00' WHERE id = {}",
            ids[3]
        ));
    }

    let all = store.queue(None, true).unwrap();
    assert!(
        !all.iter().any(|p| [ids[1], ids[2], ids[3]].contains(&p.id))
            || !matches!(backend, Backend::Sqlite)
    );
    let filters = [
        QueueFilter::default(),
        QueueFilter {
            status: Some(ProposalStatus::Pending),
            ..QueueFilter::default()
        },
        QueueFilter {
            project: Some("shop".into()),
            status: Some(ProposalStatus::Pending),
            ..QueueFilter::default()
        },
        QueueFilter {
            status: Some(ProposalStatus::Rejected),
            ..QueueFilter::default()
        },
        QueueFilter {
            source: Some(Source::Vendor),
            ..QueueFilter::default()
        },
        QueueFilter {
            source: Some(Source::User),
            ..QueueFilter::default()
        },
        QueueFilter {
            proposed_by: Some("claude".into()),
            ..QueueFilter::default()
        },
    ];
    for filter in filters {
        let expected: Vec<u64> = all
            .iter()
            .filter(|p| filter.project.as_ref().is_none_or(|x| &p.project == x))
            .filter(|p| filter.status.is_none_or(|x| p.status == x))
            .filter(|p| filter.source.is_none_or(|x| p.origin.source == x))
            .filter(|p| {
                filter
                    .proposed_by
                    .as_ref()
                    .is_none_or(|x| &p.origin.proposed_by == x)
            })
            .map(|p| p.id)
            .collect();
        for limit in 1..=4 {
            let mut got = Vec::new();
            let mut after = None;
            loop {
                let page = store.queue_page(&filter, after, limit).unwrap();
                assert!(page.items.len() <= limit);
                got.extend(page.items.iter().map(|p| p.id));
                if !page.more {
                    break;
                }
                after = page.items.last().map(|p| p.id);
            }
            assert_eq!(got, expected, "{filter:?}, limit {limit}");
        }
        let whole = store.queue_page(&filter, None, 500).unwrap();
        assert_eq!(
            whole.items.iter().map(|p| p.id).collect::<Vec<_>>(),
            expected
        );
        assert!(!whole.more);
    }
    let past = store
        .queue_page(&QueueFilter::default(), Some(u64::MAX), 10)
        .unwrap();
    assert!(past.items.is_empty() && !past.more);
}

/// Vendor sourcing is held to the project's `MAX_PENDING_PROPOSALS` as agents are: feeds of
/// several agent profiles (each within its own `MAX_PENDING_PER_PROPOSER`) cannot push a
/// project past it. Past it nothing is stored (`proposal_rejected`, as `propose` says), a
/// page's candidates all or none; a statement queued before is still simply skipped.
fn vendor_sourcing_cannot_fill_a_project_past_its_limit(backend: Backend) {
    let (_dir, store) = store(backend);
    let max = bridle_rules::MAX_PENDING_PROPOSALS;
    let per = bridle_rules::MAX_PENDING_PER_PROPOSER;
    let url = "https://vendor.example/guide";
    // One short of full: agents, each within its own limit, and one vendor statement.
    let mut first = None;
    for i in 0..max - 2 {
        let by = Origin::agent(format!("agent-{}", i / per), None);
        let p = store
            .propose("shop", &by, &guardrail(&format!("g{i}")), None)
            .unwrap();
        first.get_or_insert(p.id);
    }
    let before = "Always run the linter before you open a pull request.";
    assert!(
        store
            .queue_vendor_statement("shop", "codex", url, before)
            .unwrap()
            .is_some()
    );
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), max - 1);

    // A page of two new candidates would pass the limit: neither is stored.
    let page =
        "- Always run the tests before you commit.\n- Never push directly to the main branch.\n";
    let err = store
        .queue_vendor_guidance("shop", "claude", url, page)
        .unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert!(err.to_string().contains("waiting for review"), "{err}");
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), max - 1);

    // One fits; the next, from another profile's feed, does not.
    assert!(
        store
            .queue_vendor_statement(
                "shop",
                "claude",
                url,
                "Always run the tests before you commit."
            )
            .unwrap()
            .is_some()
    );
    let err = store
        .queue_vendor_statement(
            "shop",
            "gemini",
            url,
            "Never push directly to the main branch.",
        )
        .unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), max);
    // A statement queued before is skipped, full or not.
    assert_eq!(
        store
            .queue_vendor_statement("shop", "codex", url, before)
            .unwrap(),
        None
    );

    // A decision makes room again.
    store.reject(first.unwrap(), "alice", "not now").unwrap();
    assert!(
        store
            .queue_vendor_statement(
                "shop",
                "gemini",
                url,
                "Never push directly to the main branch."
            )
            .unwrap()
            .is_some()
    );
}

/// A proposal whose stored change is not JSON (a hand edit, a corrupted row) or not an object
/// is unreadable on its own, but fails no other proposal: a guardrail is still proposed (the
/// check for one already waiting passes it over) and vendor sourcing still finds the ids a new
/// one could collide with.
fn a_change_that_is_not_json_fails_no_proposal(backend: Backend) {
    let (dir, store) = store(backend);
    let o = Origin::agent("claude", None);
    let url = "https://vendor.example/guide";
    let waiting = store.propose("shop", &o, &guardrail("g1"), None).unwrap();
    let broken = store.propose("shop", &o, &guardrail("g2"), None).unwrap();
    let scalar = store.propose("shop", &o, &guardrail("g3"), None).unwrap();
    let vendor = store
        .queue_vendor_statement(
            "shop",
            "claude",
            url,
            "Always run the tests before you commit.",
        )
        .unwrap()
        .unwrap();
    let vendor_id = match store.proposal(vendor).unwrap().change {
        ChangeRequest::Guardrail { id, .. } => id,
        other => panic!("not a guardrail: {other:?}"),
    };
    dir.sql(&format!(
        "UPDATE proposals SET change = '{{\"kind\": \"guardrail\", \"id\": \"g2' WHERE id = {};
         UPDATE proposals SET change = '42' WHERE id = {};",
        broken.id, scalar.id
    ));
    assert_eq!(
        store.proposal(broken.id).unwrap_err().code(),
        "unreadable_record"
    );

    let p = store.propose("shop", &o, &guardrail("g4"), None).unwrap();
    assert_eq!(p.status, ProposalStatus::Pending);
    // The one waiting under its id is still found: a retry answers it, another change is refused.
    assert_eq!(
        store
            .propose("shop", &o, &guardrail("g1"), None)
            .unwrap()
            .id,
        waiting.id
    );
    let other = ChangeRequest::Guardrail {
        id: "g1".into(),
        statement: "Another statement.".into(),
        severity: Severity::Guidance,
        applies_to: vec!["all_agents".into()],
    };
    let err = store.propose("shop", &o, &other, None).unwrap_err();
    assert_eq!(err.code(), "proposal_rejected", "{err}");
    assert!(err.to_string().contains(&waiting.id.to_string()), "{err}");

    // Vendor sourcing: a statement with the same first words gets the next free id.
    let next = store
        .queue_vendor_statement(
            "shop",
            "claude",
            url,
            "Always run the tests before you push.",
        )
        .unwrap()
        .unwrap();
    match store.proposal(next).unwrap().change {
        ChangeRequest::Guardrail { id, .. } => assert_eq!(id, format!("{vendor_id}-2")),
        other => panic!("not a guardrail: {other:?}"),
    }
}

/// The proposer's name is the caller's text: a line break in it must not start a line of its
/// own in a text log (the line saying the proposal was queued).
#[test]
fn a_proposers_name_cannot_forge_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    store
        .create("shop", &RulesDocument::new("Shop"), "alice")
        .unwrap();
    let logs = kberg_testkit::log::LogBuffer::default();
    tracing::subscriber::with_default(logs.subscriber(tracing::Level::INFO), || {
        store
            .propose(
                "shop",
                &Origin::agent("claude\nERROR forged: the rules were wiped", None),
                &guardrail("tests-first"),
                None,
            )
            .unwrap();
    });
    let text = logs.text();
    assert!(text.contains("proposal queued"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("ERROR forged")),
        "{text}"
    );
}

/// The newest stored document of `shop` replaced by `text` by hand: the file, or with the
/// database as the source, the newest revision's row.
fn break_stored(fx: &Fixture, backend: Backend, text: &str) {
    match backend {
        Backend::Sqlite => std::fs::write(fx.path().join("projects/shop.yaml"), text).unwrap(),
        #[cfg(feature = "postgres")]
        Backend::Postgres => fx.sql(&format!(
            "UPDATE revisions SET document = '{text}' WHERE project = 'shop' AND revision = \
             (SELECT max(revision) FROM revisions WHERE project = 'shop')"
        )),
    }
}

/// A stored document that does not load: an edit is refused with its error, the kept copies of
/// earlier revisions still read, and `save_repair` replaces it when based on the newest
/// revision the store wrote; after that it is an edit like any other.
fn a_broken_stored_document_is_repaired_from_a_kept_revision(backend: Backend) {
    let (fx, store) = store(backend);
    let mut doc = store.load("shop").unwrap().document;
    doc.project.overview = "second".into();
    assert_eq!(
        store
            .save_edit("shop", &doc, 1, "alice", "overview")
            .unwrap(),
        2
    );
    break_stored(&fx, backend, "schema_version: 2\nproject: {name: x\n");

    assert_eq!(store.repair_base("shop").unwrap(), Some(2));
    let edit = store.save_edit("shop", &doc, 2, "alice", "again");
    assert_eq!(edit.unwrap_err().code(), "parse_error");
    // The copy of revision 1 reads while the current document does not load.
    assert_eq!(store.document_at("shop", 1).unwrap().project.overview, "");

    match store.save_repair("shop", &doc, 1, "bob", "repair") {
        Err(RulesError::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (1, 2)),
        other => panic!("a stale base is a conflict, got {other:?}"),
    }
    assert_eq!(store.load("shop").unwrap_err().code(), "parse_error");

    doc.project.overview = "repaired".into();
    let saved = store.save_repair("shop", &doc, 2, "bob", "repair").unwrap();
    assert_eq!(saved.revision, 3);
    assert_eq!(saved.replaced.map(|e| e.code()), Some("parse_error"));
    let loaded = store.load("shop").unwrap().document;
    assert_eq!(
        (loaded.revision, loaded.project.overview.as_str()),
        (3, "repaired")
    );
    let change = store.changes(Some("shop"), 0).unwrap().pop().unwrap();
    assert_eq!((change.revision, change.actor.as_str()), (3, "bob"));
    assert!(
        change
            .summary
            .ends_with("(replaced a stored document that did not load: parse_error)"),
        "{change:?}"
    );

    // Repeated, it is an ordinary edit: stale now. On a sound document it saves as one.
    assert!(matches!(
        store.save_repair("shop", &doc, 2, "bob", "repair"),
        Err(RulesError::Conflict { actual: 3, .. })
    ));
    let saved = store.save_repair("shop", &doc, 3, "bob", "tidy").unwrap();
    assert_eq!((saved.revision, saved.replaced.is_none()), (4, true));
}

/// A hand edit that parses but fails its checks still names its revision: a repair is based on
/// that one when it is past the newest the store wrote, so revisions never go back.
#[test]
fn a_repair_is_based_on_the_revision_a_broken_file_names() {
    let (fx, store) = store(Backend::Sqlite);
    let mut doc = store.load("shop").unwrap().document;
    let path = fx.path().join("projects/shop.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let broken =
        text.replacen("revision: 1", "revision: 9", 1)
            .replacen("name: Shop", "name: ''", 1);
    assert_ne!(broken, text);
    std::fs::write(&path, &broken).unwrap();
    assert_eq!(store.load("shop").unwrap_err().code(), "invalid_document");
    assert_eq!(store.repair_base("shop").unwrap(), Some(9));

    assert!(matches!(
        store.save_repair("shop", &doc, 1, "bob", "repair"),
        Err(RulesError::Conflict { actual: 9, .. })
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);
    doc.project.overview = "fixed".into();
    let saved = store.save_repair("shop", &doc, 9, "bob", "repair").unwrap();
    assert_eq!(saved.revision, 10);
    assert_eq!(saved.replaced.map(|e| e.code()), Some("invalid_document"));
    assert_eq!(store.load("shop").unwrap().document.revision, 10);
}

/// A hand edit that names a revision past the range no edit could follow is repaired from the
/// newest revision the store wrote, not held to that number.
#[test]
fn a_repair_ignores_a_revision_past_the_range() {
    let (fx, store) = store(Backend::Sqlite);
    let doc = store.load("shop").unwrap().document;
    let path = fx.path().join("projects/shop.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let broken = text.replacen("revision: 1", "revision: 9223372036854775808", 1);
    assert_ne!(broken, text);
    std::fs::write(&path, &broken).unwrap();
    assert!(store.load("shop").is_err());
    assert_eq!(store.repair_base("shop").unwrap(), Some(1));
    let saved = store.save_repair("shop", &doc, 1, "bob", "repair").unwrap();
    assert_eq!(saved.revision, 2);
    assert_eq!(store.load("shop").unwrap().document.revision, 2);
}

/// A document a newer build wrote is never replaced by a repair: this build cannot tell what
/// the replacement would drop.
#[test]
fn a_repair_never_replaces_a_document_of_a_newer_schema() {
    let (fx, store) = store(Backend::Sqlite);
    let doc = store.load("shop").unwrap().document;
    let path = fx.path().join("projects/shop.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let newer = text.replacen("schema_version: 2", "schema_version: 999", 1);
    assert_ne!(newer, text);
    std::fs::write(&path, &newer).unwrap();
    let e = store
        .save_repair("shop", &doc, 1, "bob", "repair")
        .unwrap_err();
    assert_eq!(e.code(), "schema_too_new");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);
}
