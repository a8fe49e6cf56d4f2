//! The README's example, compiled: it reaches an embedding server and a Git host that are not
//! here, so it is type-checked and not run (the other tests run each step against local
//! stand-ins). It is here verbatim (the last test checks that it still is). Change the example
//! in both places.

/// The README's example.
#[allow(dead_code, unused_variables)]
#[rustfmt::skip]
async fn open_index_search_and_serve() -> bridle_memory::Result<()> {
use bridle_memory::*;
// The binary reads QDRANT_URL / embedding settings from the environment and fills this in.
let config = MemoryConfig {
    store: StoreConfig::Embedded { path: "data/memory.sqlite".into() },
    embedder: EmbedderConfig::OpenAi(HttpEmbedderConfig::new("http://127.0.0.1:1234/v1", "text-embedding-nomic-embed-text-v1.5")),
    patterns: PatternIndexConfig::default(),
    max_memories_per_project: DEFAULT_MAX_PER_PROJECT,
};
let memory = MemoryService::open(&config).await?;

// bridle memory index --project P --tag T (the project's rules list the example's URL and arch tag)
let repo = ExampleRepo { url: "https://git.example.invalid/team/mvc-demo.git".into(), reference_tag: "mvc-demo-1".into(), arch_tag: "modified-mvc".into() };
let report = memory.patterns.index(&repo, &LineProgress::new(std::io::stderr())).await?;   // report.last_indexed -> rules document
// bridle memory refresh --project P --tag T / search --project P Q [--arch-tag A] / purge --project P --tag T
memory.patterns.refresh("mvc-demo-1", &NoProgress).await?;
let hits = memory.patterns.search("where are requests routed to controllers", Some("modified-mvc"), 5).await?;
memory.patterns.purge("mvc-demo-1").await?;

// On the gateway: the four MCP tools.
let tools = kberg_core::ToolRegistry::new();
tools::register(&tools, memory.tools()).expect("fresh registry");
    Ok(())
}

#[test]
fn the_readme_example_is_the_one_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../README.md"),
        include_str!("readme.rs"),
    );
}
