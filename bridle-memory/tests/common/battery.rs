//! The store battery: one set of behaviours every [`VectorStore`] backend must show. Each
//! backend's test file calls [`run`] with a fresh store and a collection-name prefix.

use bridle_memory::{
    CollectionConfig, Condition, Distance, Filter, MemoryError, Point, VectorStore,
};
use serde_json::json;

fn point(id: u64, vector: Vec<f32>, payload: serde_json::Value) -> Point {
    Point {
        id,
        vector,
        payload: payload.as_object().cloned().expect("object payload"),
    }
}

fn axis(dim: usize, i: usize, w: f32) -> Vec<f32> {
    let mut v = vec![0.01; dim];
    v[i] = w;
    v
}

/// Runs every check against `store`, in collections named `{prefix}_...`.
pub async fn run(store: &dyn VectorStore, prefix: &str) {
    collections(store, prefix).await;
    writes_and_search(store, prefix).await;
    filters(store, prefix).await;
    scroll_and_replace(store, prefix).await;
    hybrid(store, prefix).await;
}

async fn collections(store: &dyn VectorStore, prefix: &str) {
    let name = format!("{prefix}_coll");
    let _ = store.drop_collection(&name).await;
    assert_eq!(store.collection(&name).await.expect("lookup"), None);
    store
        .ensure_collection(&name, CollectionConfig::cosine(4))
        .await
        .expect("create");
    store
        .ensure_collection(&name, CollectionConfig::cosine(4))
        .await
        .expect("idempotent");
    assert_eq!(
        store.collection(&name).await.expect("lookup"),
        Some(CollectionConfig::cosine(4))
    );
    let err = store
        .ensure_collection(
            &name,
            CollectionConfig {
                dimension: 8,
                distance: Distance::Cosine,
            },
        )
        .await
        .expect_err("another dimension is a mismatch");
    assert_eq!(err.code(), "collection_mismatch");
    let missing = format!("{prefix}_missing");
    let err = store
        .upsert(&missing, vec![point(1, vec![1.0; 4], json!({}))])
        .await
        .expect_err("unknown");
    assert!(matches!(err, MemoryError::UnknownCollection(_)), "{err}");
    let err = store
        .search(&missing, &[1.0; 4], None, 3)
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), "unknown_collection");
    assert!(store.drop_collection(&name).await.expect("drop"));
    assert!(!store.drop_collection(&name).await.expect("drop again"));
}

async fn writes_and_search(store: &dyn VectorStore, prefix: &str) {
    let name = format!("{prefix}_search");
    let _ = store.drop_collection(&name).await;
    store
        .ensure_collection(&name, CollectionConfig::cosine(8))
        .await
        .expect("create");
    let points: Vec<Point> = (0..8)
        .map(|i| point(i as u64 + 1, axis(8, i, 1.0), json!({"i": i})))
        .collect();
    store.upsert(&name, points).await.expect("upsert");
    assert_eq!(store.count(&name, None).await.expect("count"), 8);

    // Nearest to axis 3 is point 4, with a cosine close to 1 (scale does not matter for cosine).
    let hits = store
        .search(&name, &axis(8, 3, 5.0), None, 3)
        .await
        .expect("search");
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].id, 4);
    assert!(hits[0].score > 0.99, "score {}", hits[0].score);
    assert!(
        hits[0].score >= hits[1].score && hits[1].score >= hits[2].score,
        "best first"
    );
    assert_eq!(hits[0].payload["i"], json!(3));
    assert!(
        store
            .search(&name, &axis(8, 3, 1.0), None, 0)
            .await
            .expect("k=0")
            .is_empty()
    );
    assert_eq!(
        store
            .search(&name, &axis(8, 3, 1.0), None, 100)
            .await
            .expect("k>n")
            .len(),
        8
    );

    // Wrong dimensions are refused and write nothing.
    let err = store
        .upsert(
            &name,
            vec![
                point(100, vec![1.0; 8], json!({})),
                point(101, vec![1.0; 7], json!({})),
            ],
        )
        .await
        .expect_err("dimension");
    assert!(
        matches!(
            err,
            MemoryError::DimensionMismatch {
                expected: 8,
                actual: 7
            }
        ),
        "{err}"
    );
    assert_eq!(
        store.count(&name, None).await.expect("count"),
        8,
        "all or none"
    );
    let err = store
        .search(&name, &[1.0; 3], None, 1)
        .await
        .expect_err("dimension");
    assert_eq!(err.code(), "dimension_mismatch");

    // Upserting an existing id replaces it.
    store
        .upsert(&name, vec![point(4, axis(8, 0, 1.0), json!({"i": 40}))])
        .await
        .expect("replace");
    assert_eq!(store.count(&name, None).await.expect("count"), 8);
    let hits = store
        .search(&name, &axis(8, 3, 1.0), None, 1)
        .await
        .expect("search");
    assert_ne!(hits[0].id, 4, "point 4 moved away from axis 3");
    store.drop_collection(&name).await.expect("drop");
}

async fn filters(store: &dyn VectorStore, prefix: &str) {
    let name = format!("{prefix}_filter");
    let _ = store.drop_collection(&name).await;
    store
        .ensure_collection(&name, CollectionConfig::cosine(4))
        .await
        .expect("create");
    let pts = vec![
        point(
            1,
            vec![1.0, 0.0, 0.0, 0.0],
            json!({"tag": "a", "tags": ["x", "y"], "n": 1}),
        ),
        point(
            2,
            vec![0.9, 0.1, 0.0, 0.0],
            json!({"tag": "b", "tags": ["y"], "n": 2}),
        ),
        point(
            3,
            vec![0.8, 0.2, 0.0, 0.0],
            json!({"tag": "a", "tags": ["z"], "n": 3}),
        ),
        point(4, vec![0.0, 1.0, 0.0, 0.0], json!({"tag": "c", "n": 4})),
    ];
    store.upsert(&name, pts).await.expect("upsert");
    let q = [1.0, 0.0, 0.0, 0.0];
    let ids =
        |hits: Vec<bridle_memory::ScoredPoint>| hits.into_iter().map(|h| h.id).collect::<Vec<_>>();

    let f = Filter::eq("tag", "a");
    assert_eq!(
        ids(store.search(&name, &q, Some(&f), 10).await.expect("search")),
        vec![1, 3]
    );
    assert_eq!(store.count(&name, Some(&f)).await.expect("count"), 2);
    let f = Filter::eq("tags", "y");
    assert_eq!(
        ids(store.search(&name, &q, Some(&f), 10).await.expect("search")),
        vec![1, 2],
        "array: any element"
    );
    let f = Filter::eq("n", 4i64);
    assert_eq!(
        ids(store.search(&name, &q, Some(&f), 10).await.expect("search")),
        vec![4]
    );
    let f = Filter::all().not(Condition::matches("tag", "a"));
    assert_eq!(store.count(&name, Some(&f)).await.expect("count"), 2);
    let f = Filter::all()
        .or(Condition::matches("tag", "b"))
        .or(Condition::matches("tag", "c"));
    assert_eq!(
        ids(store.search(&name, &q, Some(&f), 10).await.expect("search")),
        vec![2, 4]
    );
    let f = Filter::all().and(Condition::MatchAny {
        key: "tag".into(),
        any: vec!["b".into(), "c".into()],
    });
    assert_eq!(store.count(&name, Some(&f)).await.expect("count"), 2);
    let f = Filter::eq("tag", "a").not(Condition::HasId(vec![1]));
    assert_eq!(
        ids(store.search(&name, &q, Some(&f), 10).await.expect("search")),
        vec![3]
    );
    let f = Filter::eq("tag", "nope");
    assert!(
        store
            .search(&name, &q, Some(&f), 10)
            .await
            .expect("search")
            .is_empty()
    );
    assert_eq!(
        store
            .count(&name, Some(&Filter::eq("missing", "a")))
            .await
            .expect("count"),
        0
    );

    assert_eq!(
        store
            .delete(&name, &Filter::eq("tag", "a"))
            .await
            .expect("delete"),
        2
    );
    assert_eq!(store.count(&name, None).await.expect("count"), 2);
    assert_eq!(
        store
            .delete(&name, &Filter::eq("tag", "a"))
            .await
            .expect("delete none"),
        0
    );
    store.drop_collection(&name).await.expect("drop");
}

async fn scroll_and_replace(store: &dyn VectorStore, prefix: &str) {
    let name = format!("{prefix}_replace");
    let _ = store.drop_collection(&name).await;
    store
        .ensure_collection(&name, CollectionConfig::cosine(4))
        .await
        .expect("create");
    let pts: Vec<Point> = (1..=25u64)
        .map(|i| {
            point(
                i,
                vec![1.0, i as f32, 0.0, 0.0],
                json!({"group": if i % 2 == 0 { "even" } else { "odd" }}),
            )
        })
        .collect();
    store.upsert(&name, pts).await.expect("upsert");

    // Scroll pages through every point once, in id order.
    let mut seen = Vec::new();
    let mut offset = None;
    loop {
        let (page, next) = store.scroll(&name, None, offset, 10).await.expect("scroll");
        assert!(page.len() <= 10);
        seen.extend(page.iter().map(|r| r.id));
        match next {
            Some(n) => offset = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, (1..=25).collect::<Vec<u64>>());
    let (evens, _) = store
        .scroll(&name, Some(&Filter::eq("group", "even")), None, 100)
        .await
        .expect("scroll");
    assert_eq!(evens.len(), 12);

    // Replace the evens with three new points; the odds stay.
    let new: Vec<Point> = (100..103u64)
        .map(|i| {
            point(
                i,
                vec![0.0, 0.0, 1.0, 0.0],
                json!({"group": "even", "generation": 2}),
            )
        })
        .collect();
    let removed = store
        .replace(&name, &Filter::eq("group", "even"), new)
        .await
        .expect("replace");
    assert_eq!(removed, 12);
    assert_eq!(
        store
            .count(&name, Some(&Filter::eq("group", "even")))
            .await
            .expect("count"),
        3
    );
    assert_eq!(
        store
            .count(&name, Some(&Filter::eq("group", "odd")))
            .await
            .expect("count"),
        13
    );
    let hits = store
        .search(&name, &[0.0, 0.0, 1.0, 0.0], None, 3)
        .await
        .expect("search");
    assert!(hits.iter().all(|h| h.payload["generation"] == json!(2)));

    // A replace whose new points are invalid changes nothing.
    let bad = vec![point(200, vec![1.0; 5], json!({"group": "even"}))];
    assert!(
        store
            .replace(&name, &Filter::eq("group", "even"), bad)
            .await
            .is_err()
    );
    assert_eq!(
        store
            .count(&name, Some(&Filter::eq("group", "even")))
            .await
            .expect("count"),
        3
    );
    store.drop_collection(&name).await.expect("drop");
}

/// Hybrid search: a point the vector ranks low but whose text holds the query's rare words is
/// lifted by the keyword ranking; filters hold in both rankings; after a write the keyword
/// side sees the new text.
async fn hybrid(store: &dyn VectorStore, prefix: &str) {
    let name = format!("{prefix}_hybrid");
    let _ = store.drop_collection(&name).await;
    store
        .ensure_collection(&name, CollectionConfig::cosine(4))
        .await
        .expect("create");
    let mut points = Vec::new();
    for i in 0..12u64 {
        // Vectors close to the query for low ids, far for high ones; plain texts.
        let w = 1.0 - i as f32 * 0.08;
        points.push(point(
            i,
            vec![w, 1.0 - w, 0.1, 0.0],
            json!({"text": format!("ordinary text number {i}"), "group": if i % 2 == 0 { "even" } else { "odd" }}),
        ));
    }
    // The farthest point holds the rare words.
    points.push(point(
        12,
        vec![0.0, 1.0, 0.1, 0.0],
        json!({"text": "fn parse_comparator_operator(input: &str)", "group": "even", "file_path": "src/parse.rs"}),
    ));
    store.upsert(&name, points).await.expect("upsert");
    let query = [1.0, 0.0, 0.1, 0.0];
    let by_vector = store.search(&name, &query, None, 3).await.expect("search");
    assert!(by_vector.iter().all(|h| h.id != 12));
    let fused = store
        .search_hybrid(
            &name,
            &query,
            "where is the comparator operator parsed",
            None,
            3,
        )
        .await
        .expect("hybrid");
    assert_eq!(fused.len(), 3);
    assert!(
        fused.iter().any(|h| h.id == 12),
        "the keyword match is in the top 3: {fused:?}"
    );
    assert!(fused.windows(2).all(|w| w[0].score >= w[1].score));
    // A filter applies to both rankings.
    let odd = store
        .search_hybrid(
            &name,
            &query,
            "comparator operator",
            Some(&Filter::eq("group", "odd")),
            5,
        )
        .await
        .expect("filtered hybrid");
    assert!(!odd.is_empty() && odd.iter().all(|h| h.payload["group"] == json!("odd")));
    // No keyword in common: the vector ranking alone decides.
    let plain = store
        .search_hybrid(&name, &query, "zebra", None, 3)
        .await
        .expect("hybrid without keyword hits");
    let ids: Vec<u64> = plain.iter().map(|h| h.id).collect();
    assert_eq!(ids, by_vector.iter().map(|h| h.id).collect::<Vec<_>>());
    // The keyword side follows writes.
    store
        .upsert(
            &name,
            vec![point(
                3,
                vec![0.2, 0.8, 0.1, 0.0],
                json!({"text": "zebra crossing", "group": "odd"}),
            )],
        )
        .await
        .expect("rewrite");
    let z = store
        .search_hybrid(&name, &query, "zebra", None, 3)
        .await
        .expect("hybrid after write");
    assert_eq!(z[0].id, 3, "{z:?}");
    let err = store
        .search_hybrid(&name, &[1.0; 5], "x", None, 3)
        .await
        .expect_err("wrong dimension");
    assert_eq!(err.code(), "dimension_mismatch");
    store.drop_collection(&name).await.expect("drop");
}
