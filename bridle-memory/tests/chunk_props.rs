//! Property tests of the chunker and the filter language: arbitrary input never panics in any
//! grammar, chunks stay inside the file and within the token budget, and no non-blank line of
//! code is lost.

use bridle_memory::chunk::{ChunkConfig, chunk_file};
use bridle_memory::{Condition, Filter, MatchValue};
use proptest::prelude::*;
use serde_json::json;

fn source() -> impl Strategy<Value = String> {
    // Lines made of the characters that drive the lexers: braces, quotes, comments, indentation.
    let line = prop::collection::vec(
        prop::sample::select(vec![
            "{",
            "}",
            "(",
            ")",
            "'",
            "\"",
            "`",
            "//",
            "/*",
            "*/",
            "#",
            "@dec",
            "def f():",
            "class A:",
            "fn x()",
            "impl T",
            "func y()",
            "  ",
            "\t",
            "let a = 1;",
            "\\",
            "'a",
            "'{'",
            "x",
            ";",
            "=>",
            "async def g():",
            "class A {",
            "public void m() {",
            "namespace N {",
            "def m",
            "end",
            "<?php",
            "# Heading",
            "```",
            "struct S {",
            "/// doc",
            "#[attr]",
        ]),
        0..8,
    )
    .prop_map(|parts| parts.concat());
    prop::collection::vec(line, 0..60).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn chunks_cover_every_code_line(
        text in source(),
        ext in prop::sample::select(vec!["rs", "py", "go", "ts", "tsx", "js", "java", "c", "cpp", "cs", "rb", "php", "md", "txt"]),
        max in 16usize..80,
    ) {
        let path = format!("f.{ext}");
        let config = ChunkConfig { max_tokens: max, min_tokens: 4, overlap_lines: 1, ..Default::default() };
        // One token per whitespace-separated word: any monotone counter will do.
        let count = |t: &str| t.split_whitespace().count();
        let chunks = chunk_file(&path, &text, &config, &count);
        let lines: Vec<&str> = text.lines().collect();
        let mut covered = vec![false; lines.len()];
        for c in &chunks {
            prop_assert!(c.start_line >= 1 && c.start_line <= c.end_line && c.end_line <= lines.len());
            // The text is the lines, cut short only when one line alone exceeds the budget.
            prop_assert!(lines[c.start_line - 1..c.end_line].join("\n").starts_with(&c.text));
            prop_assert!(count(&c.embedding_text(&path)) <= max, "over budget: {:?}", c);
            for flag in covered.iter_mut().take(c.end_line).skip(c.start_line - 1) {
                *flag = true;
            }
        }
        for (i, l) in lines.iter().enumerate() {
            prop_assert!(covered[i] || l.trim().is_empty(), "line {} lost: {:?}", i + 1, l);
        }
        if ext != "txt" {
            prop_assert!(chunks.windows(2).all(|w| w[0].end_line < w[1].start_line), "code chunks do not overlap: {:?}", chunks);
        }
    }

    #[test]
    fn filters_round_trip_and_negate_exactly(
        conds in prop::collection::vec(condition(), 1..4),
        payload in payload(),
        id in 0u64..4,
    ) {
        let f = Filter { must: conds.clone(), should: vec![], must_not: vec![] };
        let json = serde_json::to_string(&f).expect("serializes");
        let back: Filter = serde_json::from_str(&json).expect("parses back");
        prop_assert_eq!(&back, &f);
        // One condition and its negation: exactly one holds, whatever the payload (a missing
        // field fails a match and passes a must_not, as in Qdrant).
        for c in conds {
            let yes = Filter { must: vec![c.clone()], ..Filter::default() }.matches(id, &payload);
            let no = Filter { must_not: vec![c], ..Filter::default() }.matches(id, &payload);
            prop_assert!(yes != no);
        }
    }
}

fn match_value() -> impl Strategy<Value = MatchValue> {
    prop_oneof![
        prop::sample::select(vec!["x", "y", "z"]).prop_map(|s| MatchValue::Keyword(s.into())),
        (0i64..3).prop_map(MatchValue::Integer),
        any::<bool>().prop_map(MatchValue::Bool),
    ]
}

fn condition() -> impl Strategy<Value = Condition> {
    let key = prop::sample::select(vec!["a", "b", "tags", "o.k"]);
    prop_oneof![
        (key.clone(), match_value()).prop_map(|(k, v)| Condition::matches(k, v)),
        (key, prop::collection::vec(match_value(), 0..3))
            .prop_map(|(k, any)| Condition::MatchAny { key: k.into(), any }),
        prop::collection::vec(0u64..4, 0..3).prop_map(Condition::HasId),
    ]
}

fn payload() -> impl Strategy<Value = serde_json::Map<String, serde_json::Value>> {
    let value = prop_oneof![
        prop::sample::select(vec!["x", "y", "z"]).prop_map(|s| json!(s)),
        (0i64..3).prop_map(|i| json!(i)),
        any::<bool>().prop_map(|b| json!(b)),
        prop::collection::vec(prop::sample::select(vec!["x", "y"]), 0..3).prop_map(|v| json!(v)),
        Just(json!({"k": "x"})),
    ];
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "tags", "o"]),
        value,
        0..4,
    )
    .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}
