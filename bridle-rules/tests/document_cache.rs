//! A store whose documents are files serves a parsed document from memory only while its file
//! is unchanged: every way of changing the file (rewritten in place with the same length and
//! modification time, replaced by a rename, deleted) is seen by the next load. The same holds
//! for the listing of the projects folder: every entry added, removed or renamed is seen by the
//! next listing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
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

#[test]
fn every_change_of_the_projects_folder_reaches_the_next_listing() {
    let dir = tempfile::tempdir().unwrap();
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    let projects = dir.path().join("projects");
    let old = SystemTime::now() - Duration::from_secs(3600);
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
