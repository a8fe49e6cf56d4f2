//! A store whose documents are files serves a parsed document from memory only while its file
//! is unchanged: every way of changing the file (rewritten in place with the same length and
//! modification time, replaced by a rename, deleted) is seen by the next load. The same holds
//! for the listing of the projects folder: every entry added, removed or renamed is seen by the
//! next listing, and for the set of every document that permission checks read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bridle_rules::{AgentCatalog, RulesError, RulesStore};

const FIXTURE: &str = include_str!("fixtures/shop.yaml");

/// Sets the file's modification time an hour back, so that its document is kept.
fn age(path: &Path, at: SystemTime) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

fn overview(store: &RulesStore) -> String {
    store.load("shop").unwrap().document.project.overview
}

#[test]
fn every_change_of_a_document_file_reaches_the_next_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    let path = dir.path().join("projects/shop.yaml");
    std::fs::write(&path, FIXTURE).unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    age(&path, old);
    assert!(overview(&store).starts_with("An online shop"));
    // Kept now; a second load answers the same.
    assert!(overview(&store).starts_with("An online shop"));

    // Rewritten in place: same inode, same length, and the modification time put back.
    let same_length = FIXTURE.replacen("An online shop", "An offline shop", 1);
    let same_length = same_length.replacen("hand-made", "handmade", 1);
    assert_eq!(same_length.len(), FIXTURE.len());
    let mut f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all(same_length.as_bytes()).unwrap();
    drop(f);
    age(&path, old);
    assert!(overview(&store).starts_with("An offline shop"));
    assert!(overview(&store).starts_with("An offline shop"));

    // Replaced by a rename (how the store and most editors write), with the old time again.
    let renamed = FIXTURE.replacen("An online shop", "A rented shop", 1);
    let tmp = dir.path().join("projects/.shop.yaml.tmp");
    std::fs::write(&tmp, &renamed).unwrap();
    age(&tmp, old);
    std::fs::rename(&tmp, &path).unwrap();
    assert!(overview(&store).starts_with("A rented shop"));

    // A clone of the store shares what it keeps, and sees the same changes.
    let clone = store.clone();
    assert!(overview(&clone).starts_with("A rented shop"));

    // Just written (not settled): read again on every load, so a second write in the same
    // tick is seen too.
    std::fs::write(&path, FIXTURE).unwrap();
    assert!(overview(&store).starts_with("An online shop"));
    std::fs::write(&path, same_length.as_bytes()).unwrap();
    assert!(overview(&store).starts_with("An offline shop"));

    // Deleted: unknown, not the kept copy.
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        store.load("shop"),
        Err(RulesError::UnknownProject(p)) if p == "shop"
    ));
}

/// Sets a folder's modification time back, so that its listing is kept.
fn age_folder(path: &Path, at: SystemTime) {
    File::open(path).unwrap().set_modified(at).unwrap();
}

/// A store on a new data folder, its projects folder, and a time an hour ago.
fn store_in_new_folder() -> (
    tempfile::TempDir,
    RulesStore,
    std::path::PathBuf,
    SystemTime,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    let projects = dir.path().join("projects");
    (
        dir,
        store,
        projects,
        SystemTime::now() - Duration::from_secs(3600),
    )
}

#[test]
fn every_change_of_the_projects_folder_reaches_the_next_listing() {
    let (_dir, store, projects, old) = store_in_new_folder();
    std::fs::write(projects.join("shop.yaml"), FIXTURE).unwrap();
    age_folder(&projects, old);
    assert_eq!(store.projects().unwrap(), ["shop"]);
    // Kept now; a second listing answers the same, and so does a clone of the store.
    assert_eq!(store.projects().unwrap(), ["shop"]);
    assert_eq!(store.clone().projects().unwrap(), ["shop"]);

    // A file added, with the folder's modification time put back: its status-change time
    // still moved, so the new project is listed.
    std::fs::write(projects.join("garden.yaml"), FIXTURE).unwrap();
    age_folder(&projects, old);
    assert_eq!(store.projects().unwrap(), ["garden", "shop"]);
    assert_eq!(store.projects().unwrap(), ["garden", "shop"]);

    // Renamed in from a file that is not a document (how the store and most editors write).
    let tmp = projects.join(".tools.yaml.tmp");
    std::fs::write(&tmp, FIXTURE).unwrap();
    age_folder(&projects, old);
    assert_eq!(store.projects().unwrap(), ["garden", "shop"]);
    std::fs::rename(&tmp, projects.join("tools.yaml")).unwrap();
    age_folder(&projects, old);
    assert_eq!(store.projects().unwrap(), ["garden", "shop", "tools"]);

    // Removed.
    std::fs::remove_file(projects.join("garden.yaml")).unwrap();
    age_folder(&projects, old);
    assert_eq!(store.projects().unwrap(), ["shop", "tools"]);

    // Just changed (not settled): read again on every listing, so a second change in the
    // same tick is seen too.
    std::fs::write(projects.join("garden.yaml"), FIXTURE).unwrap();
    assert_eq!(store.projects().unwrap(), ["garden", "shop", "tools"]);
    std::fs::remove_file(projects.join("tools.yaml")).unwrap();
    assert_eq!(store.projects().unwrap(), ["garden", "shop"]);
}

/// The first three words of every project's overview, from the store's shared set.
fn overviews(store: &RulesStore) -> Vec<(String, String)> {
    store
        .documents()
        .unwrap()
        .iter()
        .map(|(project, doc)| {
            let overview = &doc.unwrap().document.project.overview;
            let words: Vec<&str> = overview.split_whitespace().take(3).collect();
            (project.to_string(), words.join(" "))
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(p, o)| (p.to_string(), o.to_string()))
        .collect()
}

/// Writes the document of `name`, then puts its time and the folder's back to `old`.
fn write_aged(projects: &Path, name: &str, text: &str, old: SystemTime) {
    let path = projects.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    age(&path, old);
    age_folder(projects, old);
}

/// What the gateway's permission checks read: every document at once, shared while nothing
/// changed, and every change of a document file or of the folder seen by the next call.
#[test]
fn every_change_of_a_document_or_the_folder_reaches_the_next_documents_set() {
    let (_dir, store, projects, old) = store_in_new_folder();
    let write_aged = |name: &str, text: &str| write_aged(&projects, name, text, old);
    let market = FIXTURE.replacen("An online shop", "A market stall", 1);
    write_aged("shop", FIXTURE);
    write_aged("garden", &market);
    let both = pairs(&[("garden", "A market stall"), ("shop", "An online shop")]);
    assert_eq!(overviews(&store), both);
    // Kept: the same set again, also for a clone of the store.
    let first = store.documents().unwrap();
    assert!(Arc::ptr_eq(&first, &store.documents().unwrap()));
    assert!(Arc::ptr_eq(&first, &store.clone().documents().unwrap()));
    assert_eq!(first.len(), 2);
    assert!(first.get("shop").unwrap().is_ok());
    assert!(first.get("nursery").is_none());

    // Rewritten in place: same inode, same length, the modification time put back.
    let same_length = FIXTURE
        .replacen("An online shop", "An offline shop", 1)
        .replacen("hand-made", "handmade", 1);
    assert_eq!(same_length.len(), FIXTURE.len());
    let mut f = OpenOptions::new()
        .write(true)
        .open(projects.join("shop.yaml"))
        .unwrap();
    f.write_all(same_length.as_bytes()).unwrap();
    drop(f);
    age(&projects.join("shop.yaml"), old);
    let offline = pairs(&[("garden", "A market stall"), ("shop", "An offline shop")]);
    assert_eq!(overviews(&store), offline);
    assert!(!Arc::ptr_eq(&first, &store.documents().unwrap()));
    assert_eq!(overviews(&store), offline);

    // A project added, then one removed, each with the folder's time put back.
    write_aged("nursery", &market);
    assert_eq!(
        overviews(&store),
        pairs(&[
            ("garden", "A market stall"),
            ("nursery", "A market stall"),
            ("shop", "An offline shop"),
        ])
    );
    std::fs::remove_file(projects.join("garden.yaml")).unwrap();
    age_folder(&projects, old);
    let two = pairs(&[("nursery", "A market stall"), ("shop", "An offline shop")]);
    assert_eq!(overviews(&store), two);

    // A document that does not load is listed with its error on every call, and its repair
    // (with the old time put back) is seen at once.
    write_aged("nursery", "schema_version: 2\nproject: {name: x\n");
    for _ in 0..2 {
        let set = store.documents().unwrap();
        let e = set.get("nursery").unwrap().unwrap_err();
        assert_eq!(e.code(), "parse_error", "{e}");
        assert!(set.get("shop").unwrap().is_ok());
    }
    write_aged("nursery", &market);
    assert_eq!(overviews(&store), two);

    // Just written (not settled): read again on every call, so a second write in the same
    // tick is seen too.
    std::fs::write(projects.join("shop.yaml"), FIXTURE).unwrap();
    assert_eq!(overviews(&store)[1].1, "An online shop");
    std::fs::write(projects.join("shop.yaml"), same_length.as_bytes()).unwrap();
    assert_eq!(overviews(&store)[1].1, "An offline shop");
}

/// The recent set (what a forwarded call's permission check reads without I/O): only a set
/// that the last check found current and kept, never one a later write or a later check that
/// could not keep its set has made old.
#[test]
fn the_recent_set_is_the_last_set_found_current_and_nothing_older() {
    let (_dir, store, projects, old) = store_in_new_folder();
    let hour = Duration::from_secs(3600);
    let path = projects.join("shop.yaml");
    std::fs::write(&path, FIXTURE).unwrap();
    age(&path, old);
    age_folder(&projects, old);
    assert!(
        store.recent_documents(hour).is_none(),
        "nothing was checked yet"
    );
    let first = store.documents().unwrap();
    assert!(Arc::ptr_eq(&first, &store.recent_documents(hour).unwrap()));
    assert!(
        Arc::ptr_eq(&first, &store.clone().recent_documents(hour).unwrap()),
        "a clone of the store shares it"
    );

    // A write through the store forgets it at once, before any check.
    let mut edited = store.load("shop").unwrap().document;
    let base = edited.revision;
    edited.project.overview = "A market stall".into();
    store
        .save_edit("shop", &edited, base, "tester", "overview")
        .unwrap();
    assert!(store.recent_documents(hour).is_none());
    // The next check reads the new text, which has not settled: it is neither kept nor recent.
    assert_eq!(overviews(&store)[0].1, "A market stall");
    assert!(store.recent_documents(hour).is_none());

    // Settled again: kept and recent.
    age(&path, old);
    age_folder(&projects, old);
    let settled = store.documents().unwrap();
    assert!(Arc::ptr_eq(
        &settled,
        &store.recent_documents(hour).unwrap()
    ));

    // Changed by hand and checked, not settled: the kept set is forgotten.
    std::fs::write(&path, FIXTURE).unwrap();
    assert_eq!(overviews(&store)[0].1, "An online shop");
    assert!(store.recent_documents(hour).is_none());

    // A check that fails (the projects folder gone) leaves nothing recent either.
    age(&path, old);
    age_folder(&projects, old);
    store.documents().unwrap();
    assert!(store.recent_documents(hour).is_some());
    let away = projects.with_file_name("projects-away");
    std::fs::rename(&projects, &away).unwrap();
    assert!(store.documents().is_err());
    assert!(store.recent_documents(hour).is_none());
    assert!(store.unchanged_documents().is_none());
    std::fs::rename(&away, &projects).unwrap();
    assert_eq!(overviews(&store)[0].1, "An online shop");
}

/// The check an async thread may make: `stat`s only, and a set only when every stamp is the
/// kept one; anything else (nothing kept, a change, too many documents) is left to
/// `documents`.
#[test]
fn the_unchanged_set_is_handed_out_only_while_every_stamp_stands() {
    let (_dir, store, projects, old) = store_in_new_folder();
    let write_aged = |name: &str, text: &str| write_aged(&projects, name, text, old);
    write_aged("shop", FIXTURE);
    assert!(store.unchanged_documents().is_none(), "nothing kept yet");
    let kept = store.documents().unwrap();
    assert!(Arc::ptr_eq(&kept, &store.unchanged_documents().unwrap()));

    // Rewritten in place with the same length and time: its status-change time moved.
    let same_length = FIXTURE.replacen("hand-made", "handmade", 1);
    let same_length = same_length.replacen("An online shop", "An offline shop", 1);
    assert_eq!(same_length.len(), FIXTURE.len());
    write_aged("shop", &same_length);
    assert!(store.unchanged_documents().is_none());
    assert_eq!(overviews(&store)[0].1, "An offline shop");
    let second = store.unchanged_documents().unwrap();
    assert!(!Arc::ptr_eq(&kept, &second));

    // A project added: the folder's stamp moved.
    write_aged("garden", FIXTURE);
    assert!(store.unchanged_documents().is_none());
    assert_eq!(overviews(&store).len(), 2);
    assert!(store.unchanged_documents().is_some());

    // Changed and not settled: `documents` reads it and keeps nothing, so nothing is handed
    // out here until it settles.
    std::fs::write(projects.join("shop.yaml"), FIXTURE).unwrap();
    assert!(store.unchanged_documents().is_none());
    assert_eq!(overviews(&store)[1].1, "An online shop");
    assert!(store.unchanged_documents().is_none());
    age(&projects.join("shop.yaml"), old);
    store.documents().unwrap();
    assert!(store.unchanged_documents().is_some());

    // More documents than one check may `stat`: always left to `documents`.
    for i in 0..bridle_rules::UNCHANGED_CHECK_MAX {
        write_aged(&format!("p{i:03}"), FIXTURE);
    }
    assert_eq!(
        store.documents().unwrap().len(),
        bridle_rules::UNCHANGED_CHECK_MAX + 2
    );
    assert!(store.unchanged_documents().is_none());
    assert!(store.recent_documents(Duration::from_secs(3600)).is_some());
}
