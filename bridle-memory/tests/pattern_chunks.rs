//! Listing the stored chunks of pattern examples page by page, as an admin browses them:
//! filtered by pattern, example, chunk type and file; pages that follow one another without a
//! gap or a repeat; and the bad inputs (an empty page size, one too large) refused.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use bridle_memory::{
    ChunkFilter, EmbeddedStore, ExampleRepo, MemoryError, NoProgress, PatternIndex, VectorStore,
};
use common::{HashingEmbedder, write_tree};

fn example(dir: &std::path::Path, tag: &str, arch: &str, files: usize) -> ExampleRepo {
    let root = dir.join(tag);
    let owned: Vec<(String, String)> = (0..files)
        .map(|n| {
            (
                format!("src/f{n}.rs"),
                format!("/// Item {n} of {tag}.\npub fn item_{n}() -> u32 {{\n    {n}\n}}\n"),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str)> = owned
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    write_tree(&root, &borrowed);
    ExampleRepo {
        url: root.display().to_string(),
        reference_tag: tag.to_string(),
        arch_tag: arch.to_string(),
    }
}

async fn index() -> (tempfile::TempDir, PatternIndex) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn VectorStore> = Arc::new(EmbeddedStore::open_in_memory().expect("open"));
    let index = PatternIndex::new(store, Arc::new(HashingEmbedder::new(64)));
    for (tag, arch, files) in [
        ("retry-a", "retry", 7),
        ("retry-b", "retry", 3),
        ("cqrs-a", "cqrs", 4),
    ] {
        index
            .index(&example(dir.path(), tag, arch, files), &NoProgress)
            .await
            .expect("indexed");
    }
    (dir, index)
}

fn only(arch: Option<&str>, tag: Option<&str>) -> ChunkFilter {
    ChunkFilter {
        arch_tag: arch.map(str::to_string),
        reference_tags: tag.map(str::to_string).into_iter().collect(),
        ..ChunkFilter::default()
    }
}

#[tokio::test]
async fn pages_of_a_pattern_follow_one_another_to_the_end() {
    let (_dir, index) = index().await;
    let filter = only(Some("retry"), None);
    let mut seen = Vec::new();
    let mut start = None;
    let mut pages = 0;
    loop {
        let page = index.chunks(&filter, start, 3).await.expect("a page");
        assert!(page.items.len() <= 3);
        assert!(page.items.iter().all(|c| c.arch_tag == "retry"));
        seen.extend(page.items.iter().map(|c| c.id));
        pages += 1;
        match page.next {
            Some(n) => start = Some(n),
            None => break,
        }
    }
    // Ten files of `retry` (one chunk each), no repeats, in id order.
    assert_eq!(seen.len(), 10, "{seen:?}");
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 10);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(pages, 4);
    let tags: BTreeSet<String> = {
        let page = index.chunks(&filter, None, 500).await.expect("one page");
        assert_eq!(page.next, None);
        page.items.into_iter().map(|c| c.reference_tag).collect()
    };
    assert_eq!(
        tags,
        BTreeSet::from(["retry-a".to_string(), "retry-b".to_string()])
    );
}

#[tokio::test]
async fn filters_by_example_file_and_type_and_carry_the_chunk() {
    let (_dir, index) = index().await;
    let b = index
        .chunks(&only(Some("retry"), Some("retry-b")), None, 100)
        .await
        .expect("a page");
    assert_eq!(b.items.len(), 3);
    // Two examples at once: theirs and no other's.
    let two = index
        .chunks(
            &ChunkFilter {
                reference_tags: vec!["retry-b".into(), "cqrs-a".into()],
                ..ChunkFilter::default()
            },
            None,
            100,
        )
        .await
        .expect("a page");
    assert_eq!(two.items.len(), 7);
    assert!(two.items.iter().all(|c| c.reference_tag != "retry-a"));
    let one = index
        .chunks(
            &ChunkFilter {
                file_path: Some("src/f2.rs".into()),
                ..only(None, Some("cqrs-a"))
            },
            None,
            100,
        )
        .await
        .expect("a page");
    assert_eq!(one.items.len(), 1, "{:?}", one.items);
    let c = &one.items[0];
    assert_eq!(c.file_path, "src/f2.rs");
    assert_eq!(c.arch_tag, "cqrs");
    assert_eq!(c.start_line, 1);
    assert!(c.end_line >= 3);
    assert!(c.snippet.contains("pub fn item_2"), "{}", c.snippet);
    assert_eq!(c.language.as_deref(), Some("rust"));
    assert!(!c.last_indexed.is_empty());
    assert!(c.source_repo.ends_with("cqrs-a"));
    // Another type than the one stored: nothing.
    let none = index
        .chunks(
            &ChunkFilter {
                chunk_type: Some("section".into()),
                ..only(Some("cqrs"), None)
            },
            None,
            100,
        )
        .await
        .expect("a page");
    assert!(none.items.is_empty());
    assert_eq!(none.next, None);
    // The type the chunk has: it.
    let typed = index
        .chunks(
            &ChunkFilter {
                chunk_type: Some(c.chunk_type.clone()),
                ..only(Some("cqrs"), Some("cqrs-a"))
            },
            None,
            100,
        )
        .await
        .expect("a page");
    assert!(typed.items.iter().any(|t| t.id == c.id));
    // An unknown pattern is an empty listing (which patterns exist is the rules' business).
    let unknown = index
        .chunks(&only(Some("nope"), None), None, 10)
        .await
        .expect("a page");
    assert!(unknown.items.is_empty());
}

#[tokio::test]
async fn a_page_size_out_of_range_is_refused_and_an_empty_index_lists_nothing() {
    let store: Arc<dyn VectorStore> = Arc::new(EmbeddedStore::open_in_memory().expect("open"));
    let empty = PatternIndex::new(store, Arc::new(HashingEmbedder::new(64)));
    let page = empty
        .chunks(&ChunkFilter::default(), None, 10)
        .await
        .expect("nothing indexed is an empty page");
    assert!(page.items.is_empty());
    assert_eq!(page.next, None);
    for limit in [0, bridle_memory::patterns::MAX_CHUNK_PAGE + 1] {
        let e = empty
            .chunks(&ChunkFilter::default(), None, limit)
            .await
            .expect_err("refused");
        assert!(matches!(e, MemoryError::InvalidInput(_)), "{e:?}");
    }
}
