//! Property tests of the vendor extractor: random UTF-8, HTML and Markdown never panic it, and
//! every candidate it returns is a trimmed sentence of the allowed length, found in its excerpt,
//! listed once.

use bridle_rules::vendor::{DocumentFormat, Excerpted, extract, extract_candidates, fingerprint};
use proptest::prelude::*;

fn check(found: &[Excerpted]) {
    let mut seen = std::collections::BTreeSet::new();
    for c in found {
        assert_eq!(c.statement.trim(), c.statement);
        assert!(
            (20..=400).contains(&c.statement.chars().count()),
            "{:?}",
            c.statement
        );
        assert!(c.excerpt.contains(&c.statement), "{c:?}");
        assert!(seen.insert(fingerprint(&c.statement)), "duplicate {c:?}");
    }
}

/// Pieces of HTML, some with non-ASCII inside tags, attributes, scripts and comments.
fn html_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("<meta content=\"Claude’s guide\">".to_string()),
        Just("<script>var s = \"naïve — never <p>\";</script>".to_string()),
        Just("<style>p::after { content: \"→ always\" }</style>".to_string()),
        Just("<!-- commentaire « jamais » -->".to_string()),
        Just("<p>".to_string()),
        Just("</p>".to_string()),
        Just("<li>".to_string()),
        Just("</ul>".to_string()),
        Just("<pre>".to_string()),
        Just("<table><td>".to_string()),
        Just("&amp;&nbsp;&#x1F600;&bogus;".to_string()),
        Just("<".to_string()),
        Just(">".to_string()),
        Just("You should always run the tests before you commit. ".to_string()),
        "[a-zé’ —.<>/\"=]{0,40}".prop_map(|s| s),
        any::<String>(),
        ("[a-z]{1,8}", any::<String>()).prop_map(|(t, a)| format!("<{t} data-x=\"{a}\">")),
    ]
}

/// Pieces of Markdown, with nesting, fences, tables and inline HTML.
fn markdown_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("# Heading that says always do things\n".to_string()),
        Just("- Never commit secrets to the repository.\n".to_string()),
        Just("1. Prefer small diffs to big rewrites, always.\n".to_string()),
        Just("```\nalways in code\n".to_string()),
        Just("> ".to_string()),
        Just("| a | b |\n|---|---|\n".to_string()),
        Just("<div>inline <b>html</b></div>\n".to_string()),
        Just("**You must** keep `CLAUDE.md` short — très court.\n\n".to_string()),
        Just("[^1]: You should cite sources in footnotes, always.\n".to_string()),
        "[a-zé’ *_`#>|\\-\n.]{0,40}".prop_map(|s| s),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in any::<String>()) {
        check(&extract(&text, DocumentFormat::Html));
        check(&extract(&text, DocumentFormat::Markdown));
        let _ = extract_candidates(&text);
    }

    #[test]
    fn random_html_never_panics(pieces in prop::collection::vec(html_piece(), 0..40)) {
        let page = pieces.concat();
        check(&extract(&page, DocumentFormat::Html));
        check(&extract(&page, DocumentFormat::Markdown));
        let _ = extract_candidates(&page);
    }

    #[test]
    fn random_markdown_never_panics(pieces in prop::collection::vec(markdown_piece(), 0..40)) {
        let doc = pieces.concat();
        check(&extract(&doc, DocumentFormat::Markdown));
        check(&extract(&doc, DocumentFormat::Html));
        let _ = extract_candidates(&doc);
    }
}

#[test]
fn the_page_that_used_to_panic_is_read() {
    let page = "<html><head><meta content=\"Claude’s guide\"></head><body><p>You should always read Claude’s guide first.</p></body></html>";
    assert_eq!(
        extract_candidates(page),
        vec!["You should always read Claude’s guide first."]
    );
}
