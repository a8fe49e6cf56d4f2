//! The embedded store: the shared battery, persistence across reopen, crash safety under
//! SIGKILL, atomic replace under concurrent searches, and hybrid search after writes.

mod common;

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bridle_memory::{CollectionConfig, Condition, EmbeddedStore, Filter, Point, VectorStore};
use serde_json::json;

fn temp_db() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("memory.sqlite");
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn battery_on_disk() {
    let (_dir, path) = temp_db();
    let store = EmbeddedStore::open(&path).expect("open");
    common::battery::run(&store, "disk").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn battery_in_memory() {
    let store = EmbeddedStore::open_in_memory().expect("open");
    common::battery::run(&store, "mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_reopen() {
    let (_dir, path) = temp_db();
    {
        let store = EmbeddedStore::open(&path).expect("open");
        store
            .ensure_collection("c", CollectionConfig::cosine(3))
            .await
            .expect("create");
        store
            .upsert(
                "c",
                vec![
                    Point {
                        id: 7,
                        vector: vec![1.0, 0.0, 0.0],
                        payload: json!({"k": "seven"})
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    },
                    Point {
                        id: u64::MAX,
                        vector: vec![0.0, 1.0, 0.0],
                        payload: json!({"k": "max"}).as_object().cloned().unwrap_or_default(),
                    },
                ],
            )
            .await
            .expect("upsert");
        store
            .delete("c", &Filter::eq("k", "nothing"))
            .await
            .expect("delete none");
    }
    let store = EmbeddedStore::open(&path).expect("reopen");
    assert_eq!(
        store.collection("c").await.expect("lookup"),
        Some(CollectionConfig::cosine(3))
    );
    assert_eq!(store.count("c", None).await.expect("count"), 2);
    let hits = store
        .search("c", &[0.0, 2.0, 0.0], None, 1)
        .await
        .expect("search");
    assert_eq!(hits[0].id, u64::MAX, "ids keep all 64 bits");
    assert_eq!(hits[0].payload["k"], json!("max"));
}

#[test]
fn a_file_that_is_not_a_database_is_an_error() {
    let (_dir, path) = temp_db();
    std::fs::write(
        &path,
        b"this is not sqlite, just some bytes that are long enough to matter",
    )
    .expect("write");
    let err = EmbeddedStore::open(&path).expect_err("not a database");
    assert_eq!(err.code(), "store");
}

/// A collection whose recorded dimension was damaged (too large for a vector's bytes to be
/// counted) is an error at open, not a panic or a collection of empty vectors.
#[test]
fn a_damaged_dimension_is_an_error() {
    for dimension in [i64::MAX, 1 << 62, 1 << 61] {
        let (_dir, path) = temp_db();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        {
            let store = EmbeddedStore::open(&path).expect("open");
            rt.block_on(async {
                store
                    .ensure_collection("c", CollectionConfig::cosine(1))
                    .await
                    .expect("create");
                store
                    .upsert(
                        "c",
                        vec![Point {
                            id: 1,
                            vector: vec![1.0],
                            payload: Default::default(),
                        }],
                    )
                    .await
                    .expect("upsert");
            });
        }
        let conn = rusqlite::Connection::open(&path).expect("sqlite");
        conn.execute(
            "UPDATE collections SET dimension = ?1 WHERE name = 'c'",
            [dimension],
        )
        .expect("damage");
        drop(conn);
        let err = EmbeddedStore::open(&path).expect_err("a damaged dimension");
        assert_eq!(err.code(), "store", "{err}");
        assert!(err.to_string().contains("dimension"), "{err}");
    }
    // Nor can one be recorded.
    let store = EmbeddedStore::open_in_memory().expect("open");
    let err = store
        .ensure_collection_sync("c", CollectionConfig::cosine(usize::MAX))
        .expect_err("a dimension past what the file records");
    assert_eq!(err.code(), "invalid_input", "{err}");
}

/// A collection's name comes from the database file: a line break in it must not start a
/// line of its own in a text log (the line saying the collection was loaded).
#[test]
fn a_collection_name_cannot_forge_a_log_line() {
    let (_dir, path) = temp_db();
    {
        let store = EmbeddedStore::open(&path).expect("open");
        store
            .ensure_collection_sync(
                "c\nERROR forged: the store was wiped",
                CollectionConfig::cosine(1),
            )
            .expect("create");
    }
    let logs = kberg_testkit::log::LogBuffer::default();
    tracing::subscriber::with_default(logs.subscriber(tracing::Level::DEBUG), || {
        EmbeddedStore::open(&path).expect("reopen");
    });
    let text = logs.text();
    assert!(text.contains("loaded collection"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("ERROR forged")),
        "{text}"
    );
}

const CHILD_ENV: &str = "BRIDLE_MEMORY_CRASH_CHILD_DB";
const BATCH: usize = 200;

/// The writer that the crash test kills: replaces the whole collection, generation after
/// generation, printing each committed generation. Runs only when the parent test starts it.
#[test]
#[ignore = "started by killed_writer_leaves_a_consistent_store"]
fn crash_child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = EmbeddedStore::open(&path).expect("child open");
    store
        .ensure_collection_sync("c", CollectionConfig::cosine(16))
        .expect("create");
    for generation in 0u64.. {
        let points = (0..BATCH as u64)
            .map(|i| Point {
                id: generation * 1_000_000 + i,
                vector: (0..16).map(|j| ((i + j) % 7) as f32 + 1.0).collect(),
                payload: json!({"generation": generation})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        store
            .replace_sync("c", &Filter::all(), points)
            .expect("replace");
        println!("committed {generation}");
    }
}

#[test]
fn killed_writer_leaves_a_consistent_store() {
    let (_dir, path) = temp_db();
    let exe = std::env::current_exe().expect("test binary path");
    let mut child = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "crash_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut committed = 0;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if line.starts_with("committed ") {
            committed += 1;
            if committed == 5 {
                break;
            }
        }
    }
    // SIGKILL in the middle of the next transaction.
    child.kill().expect("kill the writer");
    let _ = child.wait();
    assert_eq!(committed, 5, "the writer committed before it was killed");

    let store = EmbeddedStore::open(&path).expect("reopen after the kill");
    let count = store.count_sync("c", None).expect("count");
    assert_eq!(
        count as usize, BATCH,
        "exactly one whole generation is on disk"
    );
    let (records, _) = store
        .scroll_sync("c", None, None, BATCH + 1)
        .expect("scroll");
    let generation = &records[0].payload["generation"];
    assert!(
        records
            .iter()
            .all(|r| &r.payload["generation"] == generation),
        "no mix of generations"
    );
    assert!(generation.as_u64().unwrap_or(0) >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_is_atomic_for_concurrent_searches() {
    let (_dir, path) = temp_db();
    let store = Arc::new(EmbeddedStore::open(&path).expect("open"));
    store
        .ensure_collection("c", CollectionConfig::cosine(32))
        .await
        .expect("create");
    let gen_points = |generation: u64, n: u64| -> Vec<Point> {
        (0..n)
            .map(|i| Point {
                id: generation * 10_000 + i,
                vector: (0..32).map(|j| ((i * 31 + j) % 11) as f32 - 5.0).collect(),
                payload: json!({"tag": "t", "generation": generation})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect()
    };
    store
        .replace("c", &Filter::eq("tag", "t"), gen_points(0, 300))
        .await
        .expect("first");
    let stop = Arc::new(AtomicBool::new(false));
    let searches = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for r in 0..2 {
        let (store, stop, searches) =
            (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&searches));
        readers.push(tokio::spawn(async move {
            let q: Vec<f32> = (0..32).map(|j| ((j + r) % 5) as f32).collect();
            while !stop.load(Ordering::SeqCst) {
                let hits = store
                    .search("c", &q, Some(&Filter::eq("tag", "t")), 50)
                    .await
                    .expect("search");
                assert_eq!(hits.len(), 50, "a search never sees nothing");
                let g = &hits[0].payload["generation"];
                assert!(
                    hits.iter().all(|h| &h.payload["generation"] == g),
                    "a search never sees a mix"
                );
                let n = store
                    .count("c", Some(&Filter::eq("tag", "t")))
                    .await
                    .expect("count");
                assert!(
                    n == 300 || n == 150,
                    "count is one whole generation, got {n}"
                );
                searches.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        }));
    }
    for generation in 1..=30u64 {
        let n = if generation % 2 == 0 { 300 } else { 150 };
        store
            .replace("c", &Filter::eq("tag", "t"), gen_points(generation, n))
            .await
            .expect("replace");
    }
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.expect("reader finished without a failed assertion");
    }
    assert!(searches.load(Ordering::SeqCst) > 0);
    assert_eq!(store.count("c", None).await.expect("count"), 300);
}

#[test]
fn a_large_collection_is_searched_exactly() {
    // Large enough for the parallel scan; the answer must equal a plain exact search.
    let store = EmbeddedStore::open_in_memory().expect("open");
    store
        .ensure_collection_sync(
            "big",
            CollectionConfig {
                dimension: 8,
                distance: bridle_memory::Distance::Dot,
            },
        )
        .expect("create");
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let vectors: Vec<Vec<f32>> = (0..40_000)
        .map(|_| (0..8).map(|_| next()).collect())
        .collect();
    let points = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| Point {
            id: i as u64,
            vector: v.clone(),
            payload: Default::default(),
        })
        .collect();
    store.upsert_sync("big", points).expect("upsert");
    for _ in 0..5 {
        let q: Vec<f32> = (0..8).map(|_| next()).collect();
        let mut want: Vec<(f32, u64)> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (v.iter().zip(&q).map(|(a, b)| a * b).sum::<f32>(), i as u64))
            .collect();
        want.sort_by(|a, b| b.0.total_cmp(&a.0));
        let got = store.search_sync("big", &q, None, 10).expect("search");
        assert_eq!(
            got.iter().map(|h| h.id).collect::<Vec<_>>(),
            want[..10].iter().map(|w| w.1).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_file_is_seen() {
    // The gateway keeps a store open while `bridle memory index` writes through its own.
    let (_dir, path) = temp_db();
    let gateway = EmbeddedStore::open(&path).expect("gateway opens");
    let cli = EmbeddedStore::open(&path).expect("the command line opens");
    cli.ensure_collection("c", CollectionConfig::cosine(2))
        .await
        .expect("create");
    assert_eq!(
        gateway.collection("c").await.expect("lookup"),
        Some(CollectionConfig::cosine(2))
    );
    let p = |id: u64, tag: &str| Point {
        id,
        vector: vec![1.0, id as f32],
        payload: json!({"tag": tag}).as_object().cloned().unwrap_or_default(),
    };
    cli.upsert("c", vec![p(1, "a"), p(2, "a")])
        .await
        .expect("upsert");
    assert_eq!(gateway.count("c", None).await.expect("count"), 2);
    cli.replace("c", &Filter::eq("tag", "a"), vec![p(3, "a")])
        .await
        .expect("replace");
    let hits = gateway
        .search("c", &[1.0, 3.0], None, 5)
        .await
        .expect("search");
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![3]);
    // And the other way round, through a write of the gateway's own.
    gateway
        .upsert("c", vec![p(4, "b")])
        .await
        .expect("gateway writes");
    assert_eq!(cli.count("c", None).await.expect("count"), 2);
    assert!(cli.drop_collection("c").await.expect("drop"));
    assert_eq!(gateway.collection("c").await.expect("lookup"), None);
}

/// A point for the hybrid tests: vectors fall away from the query `[1, 0, 0.3, 0]` as the id
/// grows (point 0 is the vector ranking's first), and the text holds one rare word, `tag{id}q`
/// unless given.
fn tagged(id: u64, word: &str) -> Point {
    Point {
        id,
        vector: vec![1.0, (id % 64) as f32 * 0.05, 0.3, 0.0],
        payload: json!({"text": format!("ordinary note with {word}"), "group": id % 2})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}

const HYBRID_QUERY: [f32; 4] = [1.0, 0.0, 0.3, 0.0];

/// The ids of the hybrid ranking for `text`. With at most 50 points the vector ranking lists
/// them all, so a point whose rare word is the query's alone comes first, and a query no text
/// holds ranks as the vector search does.
fn hybrid_ids(store: &EmbeddedStore, text: &str) -> Vec<u64> {
    store
        .search_hybrid_sync("kw", &HYBRID_QUERY, text, None, 5)
        .expect("hybrid")
        .iter()
        .map(|h| h.id)
        .collect()
}

fn vector_ids(store: &EmbeddedStore) -> Vec<u64> {
    store
        .search_sync("kw", &HYBRID_QUERY, None, 5)
        .expect("search")
        .iter()
        .map(|h| h.id)
        .collect()
}

fn forget(store: &EmbeddedStore, id: u64) {
    store
        .delete_sync("kw", &Filter::all().and(Condition::HasId(vec![id])))
        .expect("delete by id");
}

/// The keyword side sees a point's text: its rare word puts it first.
fn assert_found(store: &EmbeddedStore, id: u64, word: &str) {
    let ids = hybrid_ids(store, word);
    assert_eq!(ids[0], id, "`{word}` finds point {id}: {ids:?}");
}

/// No text holds the word any more: the vector ranking alone decides.
fn assert_gone(store: &EmbeddedStore, word: &str) {
    assert_eq!(
        hybrid_ids(store, word),
        vector_ids(store),
        "`{word}` is gone"
    );
}

#[test]
fn hybrid_search_follows_writes_and_removals() {
    let store = EmbeddedStore::open_in_memory().expect("open");
    store
        .ensure_collection_sync("kw", CollectionConfig::cosine(4))
        .expect("create");
    store
        .upsert_sync(
            "kw",
            (0..40).map(|i| tagged(i, &format!("tag{i}q"))).collect(),
        )
        .expect("upsert");
    // The first hybrid search builds the keyword index; the writes after it update it.
    assert_found(&store, 7, "tag7q");
    store
        .upsert_sync("kw", vec![tagged(40, "tag40q")])
        .expect("a new point");
    assert_found(&store, 40, "tag40q");
    // Removing a point from the middle moves the last row into its place.
    forget(&store, 5);
    assert_gone(&store, "tag5q");
    assert_found(&store, 40, "tag40q");
    assert_found(&store, 39, "tag39q");
    // An overwritten text is searched as it is now.
    store
        .upsert_sync("kw", vec![tagged(12, "rewritten")])
        .expect("overwrite");
    assert_gone(&store, "tag12q");
    assert_found(&store, 12, "rewritten");
    // A replace removes and adds in one write.
    let replaced = store
        .replace_sync(
            "kw",
            &Filter::eq("group", 0),
            (100..104)
                .map(|i| tagged(i, &format!("fresh{i}q")))
                .collect(),
        )
        .expect("replace");
    assert_eq!(replaced, 21, "the even ids of 0 to 40");
    for i in (0..=40).filter(|i| i % 2 == 0 && *i != 12) {
        assert_gone(&store, &format!("tag{i}q"));
    }
    assert_gone(&store, "rewritten");
    for i in (1..40).step_by(2).filter(|i| *i != 5) {
        assert_found(&store, i, &format!("tag{i}q"));
    }
    for i in 100..104 {
        assert_found(&store, i, &format!("fresh{i}q"));
    }
    // Remember, recall, forget, many times over.
    for k in 0..200u64 {
        let id = 1_000 + k;
        store
            .upsert_sync("kw", vec![tagged(id, &format!("churn{k}q"))])
            .expect("remember");
        assert_found(&store, id, &format!("churn{k}q"));
        if k > 0 {
            forget(&store, id - 1);
            assert_gone(&store, &format!("churn{}q", k - 1));
        }
    }
    assert_eq!(store.count_sync("kw", None).expect("count"), 19 + 4 + 1);
}

#[test]
fn hybrid_search_sees_another_connections_writes() {
    // The gateway searches while `bridle memory index` writes through its own connection.
    let (_dir, path) = temp_db();
    let gateway = EmbeddedStore::open(&path).expect("gateway opens");
    let cli = EmbeddedStore::open(&path).expect("the command line opens");
    cli.ensure_collection_sync("kw", CollectionConfig::cosine(4))
        .expect("create");
    cli.upsert_sync(
        "kw",
        (0..10).map(|i| tagged(i, &format!("tag{i}q"))).collect(),
    )
    .expect("upsert");
    assert_found(&gateway, 3, "tag3q");
    cli.upsert_sync("kw", vec![tagged(20, "outside")])
        .expect("another connection writes");
    assert_found(&gateway, 20, "outside");
    forget(&cli, 3);
    assert_gone(&gateway, "tag3q");
    // The gateway's own writes after the reload update the index it rebuilt.
    gateway
        .upsert_sync("kw", vec![tagged(21, "inside")])
        .expect("gateway writes");
    assert_found(&gateway, 21, "inside");
    forget(&gateway, 20);
    assert_gone(&gateway, "outside");
    assert_found(&gateway, 21, "inside");
}
