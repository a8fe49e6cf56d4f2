//! The agent types Bridle renders rules for, and where each one reads its instructions.
//!
//! Built-in targets cover the agents people commonly run; each entry names the file the agent
//! reads by convention and the template that renders it. A templates folder can add agents
//! (`agents.yaml` plus `<name>.j2`) or override a built-in template (`<name>.j2`) without
//! recompiling; [`AgentCatalog::load`] reads it. The catalog is also what document validation
//! checks agent names against.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{RulesError, check_name};

/// How a renderer phrases rules for an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// Ordinary headings and bullet lists.
    #[default]
    Plain,
    /// Explicit, numbered, step-by-step phrasing for agents that follow guardrails less
    /// reliably.
    Stepwise,
}

/// One agent type and the file it reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTarget {
    /// The agent type's name (`claude`).
    pub name: String,
    /// The product's name (`Claude Code`).
    pub display: String,
    /// The file it reads, relative to the project root (`CLAUDE.md`).
    pub output: String,
    /// The phrasing.
    pub style: Style,
    /// Whether the template comes from the templates folder rather than the built-in set.
    #[serde(skip)]
    pub custom_template: Option<PathBuf>,
}

/// The built-in agent types: (name, product, output file, style).
pub const BUILTIN_AGENTS: &[(&str, &str, &str, Style)] = &[
    ("aider", "Aider", "CONVENTIONS.md", Style::Plain),
    ("claude", "Claude Code", "CLAUDE.md", Style::Plain),
    ("cline", "Cline", ".clinerules/bridle.md", Style::Plain),
    ("codex", "Codex", "AGENTS.md", Style::Plain),
    (
        "copilot",
        "GitHub Copilot",
        ".github/copilot-instructions.md",
        Style::Plain,
    ),
    ("cursor", "Cursor", ".cursor/rules/bridle.mdc", Style::Plain),
    ("deepseek", "DeepSeek", "AGENTS.md", Style::Stepwise),
    ("gemini", "Gemini CLI", "GEMINI.md", Style::Plain),
    ("junie", "Junie", ".junie/guidelines.md", Style::Plain),
    ("kimi", "Kimi", "AGENTS.md", Style::Stepwise),
    (
        "windsurf",
        "Windsurf",
        ".windsurf/rules/bridle.md",
        Style::Plain,
    ),
    ("zed", "Zed", ".rules", Style::Plain),
];

/// An agent a templates folder adds, as written in its `agents.yaml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CustomAgent {
    display: String,
    output: String,
    #[serde(default)]
    style: Style,
}

/// Every agent type Bridle knows: the built-ins plus those a templates folder adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCatalog {
    agents: BTreeMap<String, AgentTarget>,
    templates_dir: Option<PathBuf>,
}

impl Default for AgentCatalog {
    fn default() -> Self {
        Self::builtin()
    }
}

impl AgentCatalog {
    /// The built-in agent types only.
    pub fn builtin() -> Self {
        let agents = BUILTIN_AGENTS
            .iter()
            .map(|(name, display, output, style)| {
                (
                    name.to_string(),
                    AgentTarget {
                        name: name.to_string(),
                        display: display.to_string(),
                        output: output.to_string(),
                        style: *style,
                        custom_template: None,
                    },
                )
            })
            .collect();
        Self {
            agents,
            templates_dir: None,
        }
    }

    /// The built-ins plus a templates folder: `<dir>/<agent>.j2` overrides an agent's template;
    /// `<dir>/agents.yaml` maps new agent names to `{display, output, style}` and each needs a
    /// `<dir>/<name>.j2`. A missing folder is the same as an empty one.
    pub fn load(dir: &Path) -> Result<Self, RulesError> {
        let mut catalog = Self::builtin();
        catalog.templates_dir = Some(dir.to_path_buf());
        if !dir.is_dir() {
            return Ok(catalog);
        }
        let agents_file = dir.join("agents.yaml");
        if agents_file.is_file() {
            let text = std::fs::read_to_string(&agents_file)
                .map_err(|e| RulesError::io(&agents_file, e))?;
            let custom: BTreeMap<String, CustomAgent> = serde_saphyr::from_str(&text)
                .map_err(|e| crate::yaml::parse_error(&agents_file, &text, &e))?;
            for (name, c) in custom {
                check_name("agent", &name)?;
                let template = dir.join(format!("{name}.j2"));
                if !template.is_file() {
                    return Err(RulesError::Template {
                        name: format!("{name}.j2"),
                        message: format!(
                            "{} defines agent `{name}` but {} does not exist",
                            agents_file.display(),
                            template.display()
                        ),
                    });
                }
                check_output_path(&name, &c.output)?;
                catalog.agents.insert(
                    name.clone(),
                    AgentTarget {
                        name,
                        display: c.display,
                        output: c.output,
                        style: c.style,
                        custom_template: None,
                    },
                );
            }
        }
        for target in catalog.agents.values_mut() {
            let template = dir.join(format!("{}.j2", target.name));
            if template.is_file() {
                target.custom_template = Some(template);
            }
        }
        Ok(catalog)
    }

    /// The templates folder this catalog was loaded from, if any.
    pub fn templates_dir(&self) -> Option<&Path> {
        self.templates_dir.as_deref()
    }

    /// The agent type with this name.
    pub fn get(&self, name: &str) -> Result<&AgentTarget, RulesError> {
        self.agents
            .get(name)
            .ok_or_else(|| RulesError::UnknownAgent {
                agent: name.to_string(),
                known: self.names().join(", "),
            })
    }

    /// Whether an agent type is known.
    pub fn contains(&self, name: &str) -> bool {
        self.agents.contains_key(name)
    }

    /// Every known name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.agents.keys().map(String::as_str).collect()
    }

    /// Every target, sorted by name.
    pub fn targets(&self) -> impl Iterator<Item = &AgentTarget> {
        self.agents.values()
    }

    /// Guesses the agent type from an MCP client's `clientInfo.name` (`claude-code`,
    /// `codex-mcp-client`, `Cursor`, ...): the first known name the client name contains.
    pub fn guess_from_client(&self, client_name: &str) -> Option<&AgentTarget> {
        let lower = client_name.to_ascii_lowercase();
        self.agents.values().find(|t| lower.contains(&t.name))
    }
}

/// An output path must stay inside the project: relative, no `..`, not empty.
fn check_output_path(agent: &str, output: &str) -> Result<(), RulesError> {
    let p = Path::new(output);
    let bad = output.is_empty()
        || p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)));
    if bad {
        return Err(RulesError::InvalidName {
            what: "output path",
            name: format!("{agent}: {output}"),
            reason: "must be a relative path inside the project without `..`",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_sorted() {
        let c = AgentCatalog::builtin();
        for t in c.targets() {
            check_name("agent", &t.name).unwrap();
            check_output_path(&t.name, &t.output).unwrap();
        }
        let names = c.names();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(c.get("claude").unwrap().output, "CLAUDE.md");
        assert!(matches!(
            c.get("nope"),
            Err(RulesError::UnknownAgent { .. })
        ));
    }

    #[test]
    fn output_paths_stay_inside() {
        assert!(check_output_path("x", "../x.md").is_err());
        assert!(check_output_path("x", "/etc/x").is_err());
        assert!(check_output_path("x", "").is_err());
        assert!(check_output_path("x", "a/b.md").is_ok());
    }

    #[test]
    fn client_names_hint_the_agent() {
        let c = AgentCatalog::builtin();
        assert_eq!(c.guess_from_client("claude-code").unwrap().name, "claude");
        assert_eq!(
            c.guess_from_client("codex-mcp-client").unwrap().name,
            "codex"
        );
        assert!(c.guess_from_client("mcp").is_none());
    }
}
