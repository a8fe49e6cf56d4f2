//! The README's example, compiled and run: building providers reaches no server. It is here
//! verbatim (the last test checks that it still is). Change the example in both places.

use kberg_agent::InferenceProvider;

type Outcome = Result<(), Box<dyn std::error::Error>>;

/// The README's example; it reads the Anthropic key from the environment, as it says to.
#[rustfmt::skip]
fn providers() -> Outcome {
use kberg_providers::ollama::{OllamaConfig, OllamaProvider};
use kberg_providers::openai::{OpenAiConfig, OpenAiProvider};
use kberg_providers::anthropic::{AnthropicConfig, AnthropicProvider};
use kberg_providers::HttpOptions;

let ollama = OllamaProvider::new(OllamaConfig::new("qwen2.5").keep_alive("10m"));
let lm_studio = OpenAiProvider::new(OpenAiConfig::new("qwen2.5-7b-instruct").base_url("http://127.0.0.1:1234/v1"));
// Keys are plain config: read them from the environment in your binary, never in a library.
let claude = AnthropicProvider::new(
    AnthropicConfig::new("claude-sonnet-4-5").api_key(std::env::var("ANTHROPIC_API_KEY")?)
        .http(HttpOptions::default().max_retries(3)),
);
    assert_eq!((ollama.name(), ollama.model()), ("ollama", "qwen2.5"));
    assert_eq!((lm_studio.name(), lm_studio.model()), ("openai", "qwen2.5-7b-instruct"));
    assert_eq!((claude.name(), claude.model()), ("anthropic", "claude-sonnet-4-5"));
    Ok(())
}

/// Set in the child process this test runs itself in.
const KEY: &str = "sk-ant-readme-example";

#[test]
fn the_readme_example_builds_its_providers() {
    match std::env::var("ANTHROPIC_API_KEY") {
        Ok(key) if key == KEY => providers().expect("the README's example"),
        // The example reads its key from the environment, which a test cannot set in its own
        // process: this test runs again in a child process that has it.
        _ => {
            let child =
                std::process::Command::new(std::env::current_exe().expect("the test binary"))
                    .args([
                        "--exact",
                        "the_readme_example_builds_its_providers",
                        "--test-threads=1",
                    ])
                    .env("ANTHROPIC_API_KEY", KEY)
                    .output()
                    .expect("the test binary runs");
            let out = String::from_utf8_lossy(&child.stdout);
            assert!(
                child.status.success(),
                "{out}{}",
                String::from_utf8_lossy(&child.stderr)
            );
            assert!(out.contains("1 passed"), "{out}");
        }
    }
}

#[test]
fn the_readme_example_is_the_one_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../README.md"),
        include_str!("readme.rs"),
    );
}
