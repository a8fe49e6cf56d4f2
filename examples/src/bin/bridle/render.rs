//! `bridle render`: writes (or, with `--check`, compares) an agent's instruction file. A file
//! Bridle did not write (a hand-written `CLAUDE.md`) is replaced only with `--force`.

use std::path::Path;
use std::process::ExitCode;

use bridle_rules::{GENERATED_MARK, Renderer, fsutil::write_atomic};

use crate::{BoxError, open_store};

pub(crate) fn render(
    dir: &Path,
    project: &str,
    agents: &str,
    out: &Path,
    check: bool,
    force: bool,
) -> Result<ExitCode, BoxError> {
    // The project's folder must be there: a mistyped path would become a new folder, and the
    // files Bridle wrote would sit where no agent reads them.
    match std::fs::metadata(out) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "{} is not a folder; --out names the project's folder, where the agent's file goes",
                out.display()
            )
            .into());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "there is no folder at {}; --out names the project's folder (it must exist), where the agent's file goes",
                out.display()
            )
            .into());
        }
        Err(e) => return Err(format!("cannot read {}: {e}", out.display()).into()),
    }
    let (store, renderer) = open_store(dir)?;
    let doc = store.load(project)?.document;
    // Render everything first: nothing is written unless every agent renders.
    let mut rendered: Vec<bridle_rules::Rendered> = Vec::new();
    for agent in agents.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let r = renderer.render(project, &doc, agent)?;
        if let Some(other) = rendered.iter().find(|o| o.path == r.path) {
            return Err(format!(
                "agents `{}` and `{agent}` both write {}; render them into different folders",
                other.agent, r.path
            )
            .into());
        }
        rendered.push(r);
    }
    if rendered.is_empty() {
        return Err("name at least one agent with --agent".into());
    }
    // Nothing is written when one of the files would replace one Bridle did not write.
    if !check && !force {
        let mut foreign = Vec::new();
        for r in &rendered {
            if Renderer::replaces_foreign_file(out, r)? {
                foreign.push(out.join(&r.path).display().to_string());
            }
        }
        if !foreign.is_empty() {
            let (exists, it, says) = if foreign.len() == 1 {
                ("exists", "it", "it says")
            } else {
                ("exist", "them", "they say")
            };
            return Err(format!(
                "{} {exists} and Bridle did not write {it} (no \"{GENERATED_MARK}\" notice), so nothing was written: move what {says} into the project's rules (an agent's proposal, or projects/{project}.yaml), then render with --force to replace {it}",
                foreign.join(" and ")
            )
            .into());
        }
    }
    let mut stale = false;
    for r in &rendered {
        let path = out.join(&r.path);
        if check {
            match Renderer::check(out, r)? {
                None => println!("{} is up to date", path.display()),
                Some(diff) => {
                    print!("{diff}");
                    if Renderer::replaces_foreign_file(out, r)? {
                        eprintln!(
                            "{} is not Bridle's (no \"{GENERATED_MARK}\" notice); move what it says into the project's rules, then `bridle render --project {project} --agent {} --force` replaces it",
                            path.display(),
                            r.agent
                        );
                    } else {
                        eprintln!(
                            "{} is stale; run `bridle render --project {project} --agent {}` to update it",
                            path.display(),
                            r.agent
                        );
                    }
                    stale = true;
                }
            }
        } else {
            write_atomic(&path, r.content.as_bytes())?;
            println!("wrote {}", path.display());
        }
    }
    Ok(if stale {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
