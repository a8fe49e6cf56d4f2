//! The README's example, compiled and run. It is here verbatim (the last test checks that it
//! still is), inside a function that sets up what the README leaves out (a data folder with a
//! project, the project's folder) and checks what it wrote. Change the example in both places.

#[rustfmt::skip]
#[test]
fn the_example_renders_a_project_for_an_agent() -> Result<(), Box<dyn std::error::Error>> {
    let data = tempfile::tempdir()?;
    let project = tempfile::tempdir()?;
    let (data_dir, project_root) = (data.path().to_path_buf(), project.path());
    RulesStore::open(&data_dir, AgentCatalog::builtin())?.create("shop", &RulesDocument::new("Shop"), "alice")?;
use bridle_rules::*;
let store = RulesStore::open(&data_dir, AgentCatalog::builtin())?;
let doc = store.load("shop")?.document;
let out = Renderer::builtin().render("shop", &doc, "codex")?;
std::fs::write(project_root.join(&out.path), out.content)?; // out.path is relative to the project
    let written = std::fs::read_to_string(project_root.join("AGENTS.md"))?;
    assert!(written.contains("Shop"), "{written}");
    Ok(())
}

#[test]
fn the_readme_example_is_the_one_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../README.md"),
        include_str!("readme.rs"),
    );
}
