//! Cloning a private example repository with a credential kept out of its URL: a real git
//! client against git's own smart-HTTP server (`kberg_testkit::git`, `git http-backend` behind
//! HTTP Basic authentication on 127.0.0.1). The credential goes to its site only, never
//! into a report or an error, and the owner's lookup is asked once per clone, with the example's
//! tag.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bridle_memory::repo::{GitAuth, GitCredentials, fetch, fetch_with};
use bridle_memory::{EmbeddedStore, ExampleRepo, MemoryError, NoProgress, PatternIndex};
use common::{HashingEmbedder, write_tree};
use kberg_testkit::git::PrivateGitHost;

const USER: &str = "bridle-bot";
const SECRET: &str = "canary-git-secret-5Rk8Wq";
const TIMEOUT: Duration = Duration::from_secs(60);

/// The private host, serving `team/app.git` of two source files.
fn host() -> PrivateGitHost {
    PrivateGitHost::start(
        USER,
        SECRET,
        &[
            (
                "src/lib.rs",
                "pub fn private_pattern_example() -> u32 { 7 }\n",
            ),
            ("src/port.rs", "pub trait InvoicePort { fn send(&self); }\n"),
        ],
    )
}

fn auth(site: &str) -> GitAuth {
    GitAuth::basic(site, USER, SECRET).expect("a valid credential")
}

fn assert_no_secret(shown: &str) {
    assert!(!shown.contains(SECRET), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_repository_is_cloned_with_the_credential_of_its_site() {
    let host = host();
    let url = host.url("team/app.git");
    let checkout = fetch_with(&url, Some(&auth(&host.url("team/"))), TIMEOUT)
        .await
        .expect("cloned with the credential");
    assert!(checkout.root().join("src/lib.rs").is_file());
    let seen = host.seen();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|l| l.ends_with("auth=yes")), "{seen:?}");

    // The same credential for the whole host covers it too.
    fetch_with(&url, Some(&auth(&host.url(""))), TIMEOUT)
        .await
        .expect("cloned with the host's credential");
    host.seen();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_credential_a_private_clone_fails_clearly_and_others_get_none() {
    let host = host();
    let url = host.url("team/app.git");
    let e = fetch(&url, TIMEOUT).await.map(|_| ()).expect_err("private");
    assert_eq!(e.code(), "repo_unavailable");
    assert!(e.to_string().contains("needs credentials"), "{e}");
    let without = |seen: &[String]| {
        !seen.is_empty()
            && seen
                .iter()
                .all(|l| l.ends_with("auth=no") || l.ends_with("auth=empty"))
    };
    let seen = host.seen();
    assert!(without(&seen), "{seen:?}");

    // A credential for another path, port or scheme is not sent.
    let other_port = format!("http://127.0.0.1:{}/", host.port.wrapping_add(1).max(1));
    for site in [host.url("other/"), other_port, host.url("team/app")] {
        let e = fetch_with(&url, Some(&auth(&site)), TIMEOUT)
            .await
            .map(|_| ())
            .expect_err("not this site's credential");
        assert_eq!(e.code(), "repo_unavailable", "{site}: {e}");
        let seen = host.seen();
        assert!(without(&seen), "{site}: {seen:?}");
    }

    // A wrong secret fails without quoting the right one or itself.
    let wrong = GitAuth::basic(&host.url(""), USER, "wrong-secret-canary").expect("valid");
    let e = fetch_with(&url, Some(&wrong), TIMEOUT)
        .await
        .map(|_| ())
        .expect_err("refused");
    let shown = format!("{e} {e:?} {wrong:?}");
    assert_no_secret(&shown);
    assert!(!shown.contains("wrong-secret-canary"), "{shown}");
    let seen = host.seen();
    assert!(seen.iter().any(|l| l.ends_with("auth=other")), "{seen:?}");
    assert!(!seen.iter().any(|l| l.ends_with("auth=yes")), "{seen:?}");
}

#[test]
fn a_credential_is_refused_where_it_could_leak_or_break_the_header() {
    let bad = [
        ("http://git.example/", USER, SECRET),
        ("ftp://127.0.0.1/", USER, SECRET),
        ("https://me:pw@git.example/", USER, SECRET),
        ("https://git.example/?t=1", USER, SECRET),
        ("not a url", USER, SECRET),
        ("https://git.example/", "", SECRET),
        ("https://git.example/", "a:b", SECRET),
        ("https://git.example/", USER, ""),
        ("https://git.example/", USER, "line\nX-Injected: 1"),
    ];
    for (site, user, secret) in bad {
        let e = GitAuth::basic(site, user, secret).expect_err(site);
        assert_eq!(e.code(), "invalid_input", "{site}");
        assert_no_secret(&e.to_string());
    }
    for ok in [
        "https://git.example",
        "http://localhost:3000/",
        "http://[::1]:3000/x",
    ] {
        GitAuth::basic(ok, USER, SECRET).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

/// The owner's lookup: hands out the host's credential and notes each question.
#[derive(Debug)]
struct Lookup {
    auth: Option<GitAuth>,
    asked: Mutex<Vec<(String, String)>>,
}

impl GitCredentials for Lookup {
    fn for_clone(&self, url: &str, reference_tag: &str) -> bridle_memory::Result<Option<GitAuth>> {
        self.asked
            .lock()
            .expect("not poisoned")
            .push((url.to_string(), reference_tag.to_string()));
        match &self.auth {
            Some(a) => Ok(Some(a.clone())),
            None => Err(MemoryError::InvalidInput(
                "the secret `gitea-read` is revoked".into(),
            )),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_takes_its_clone_credential_from_the_owner_once_per_clone() {
    let host = host();
    let url = host.url("team/app.git");
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(EmbeddedStore::open(dir.path().join("m.sqlite")).expect("store"));
    let lookup = Arc::new(Lookup {
        auth: Some(auth(&host.url(""))),
        asked: Mutex::new(Vec::new()),
    });
    let index = PatternIndex::new(store.clone(), Arc::new(HashingEmbedder::new(64)))
        .with_git_credentials(lookup.clone());
    let repo = ExampleRepo {
        url: url.clone(),
        reference_tag: "private-1".into(),
        arch_tag: "hexagonal".into(),
    };
    let report = index.index(&repo, &NoProgress).await.expect("indexed");
    assert_eq!(report.files, 2);
    assert_eq!(report.source_repo, url);
    assert_no_secret(&format!("{report:?} {index:?}"));
    let hits = index
        .search("private pattern example", None, 5)
        .await
        .expect("search");
    assert!(hits.iter().any(|h| h.file_path == "src/lib.rs"), "{hits:?}");
    assert_no_secret(&format!("{hits:?}"));
    assert_eq!(
        *lookup.asked.lock().expect("not poisoned"),
        [(url.clone(), "private-1".to_string())]
    );
    host.seen();

    // A local directory is not a clone: the owner is not asked.
    let local = dir.path().join("local");
    write_tree(&local, &[("src/a.rs", "pub fn a() {}\n")]);
    let repo = ExampleRepo {
        url: local.to_string_lossy().into_owned(),
        reference_tag: "local-1".into(),
        arch_tag: "hexagonal".into(),
    };
    index.index(&repo, &NoProgress).await.expect("indexed");
    assert_eq!(lookup.asked.lock().expect("not poisoned").len(), 1);

    // A lookup that fails ends the run before anything is cloned; the previous index stays.
    let failing = PatternIndex::new(store, Arc::new(HashingEmbedder::new(64)))
        .with_git_credentials(Arc::new(Lookup {
            auth: None,
            asked: Mutex::new(Vec::new()),
        }));
    let repo = ExampleRepo {
        url: url.clone(),
        reference_tag: "private-1".into(),
        arch_tag: "hexagonal".into(),
    };
    let e = failing
        .index(&repo, &NoProgress)
        .await
        .expect_err("no credential");
    assert!(e.to_string().contains("revoked"), "{e}");
    assert!(host.seen().is_empty(), "nothing was cloned");
    let hits = failing
        .search("private pattern example", None, 5)
        .await
        .expect("search");
    assert!(hits.iter().any(|h| h.file_path == "src/lib.rs"), "{hits:?}");
}
