//! Rendering the canonical document into each agent's native instruction file.
//!
//! One [`Renderer`] holds a minijinja environment with the built-in templates (embedded in the
//! binary) and, when the catalog came from a templates folder, the user's templates on top: a
//! file there named after an agent replaces that agent's built-in template, and agents the
//! folder adds use their own. Templates receive a precomputed view (guardrails grouped by
//! severity, provenance in words) so that they stay declarative.
//!
//! Output is deterministic: the view is built from ordered data, the text is normalized
//! (trailing spaces removed, runs of blank lines collapsed, one final newline), and the
//! generated-file notice carries the document's revision, never a clock.

use std::path::Path;

use minijinja::Environment;
use serde::Serialize;

use crate::agents::{AgentCatalog, AgentTarget, Style};
use crate::error::RulesError;
use crate::model::{
    AgentPermissions, Guardrail, Patterns, ProjectInfo, RulesDocument, Severity, Source,
};
use crate::redact::redact_url;

const COMMON: &str = include_str!("../templates/_common.j2");

/// The built-in templates, by agent name.
const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    ("aider", include_str!("../templates/aider.j2")),
    ("claude", include_str!("../templates/claude.j2")),
    ("cline", include_str!("../templates/cline.j2")),
    ("codex", include_str!("../templates/codex.j2")),
    ("copilot", include_str!("../templates/copilot.j2")),
    ("cursor", include_str!("../templates/cursor.j2")),
    ("deepseek", include_str!("../templates/stepwise.j2")),
    ("gemini", include_str!("../templates/gemini.j2")),
    ("junie", include_str!("../templates/junie.j2")),
    ("kimi", include_str!("../templates/stepwise.j2")),
    ("windsurf", include_str!("../templates/windsurf.j2")),
    ("zed", include_str!("../templates/zed.j2")),
];

/// One rendered instruction file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rendered {
    /// The agent type it is for.
    pub agent: String,
    /// Where it goes, relative to the project root.
    pub path: String,
    /// Its text.
    pub content: String,
}

#[derive(Serialize)]
struct AgentView<'a> {
    name: &'a str,
    display: &'a str,
    output: &'a str,
    stepwise: bool,
}

#[derive(Serialize)]
struct GuardrailView<'a> {
    id: &'a str,
    statement: &'a str,
    severity: &'static str,
    provenance: String,
}

#[derive(Serialize)]
struct View<'a> {
    project_id: &'a str,
    generated: String,
    revision: u64,
    schema_version: u32,
    agent: AgentView<'a>,
    project: &'a ProjectInfo,
    enforcement: Vec<GuardrailView<'a>>,
    hard_instructions: Vec<GuardrailView<'a>>,
    guidance: Vec<GuardrailView<'a>>,
    /// The document's patterns, each example repository's URL as [`redact_url`] shows it.
    patterns: Patterns,
    permissions: AgentPermissions,
    capabilities: &'a [String],
}

/// What a template receives: everything under `view`.
#[derive(Serialize)]
struct Context<'a> {
    view: View<'a>,
}

/// The provenance of a guardrail, in words.
pub fn provenance_text(g: &Guardrail) -> String {
    let p = &g.provenance;
    let mut s = match p.source {
        Source::User => "set by the project's maintainers".to_string(),
        Source::Agent => {
            let mut s = format!(
                "proposed by agent {}",
                p.proposed_by.as_deref().unwrap_or("(unknown)")
            );
            if let Some(session) = &p.agent_session {
                s.push_str(&format!(" in session {session}"));
            }
            s
        }
        Source::Vendor => format!(
            "suggested by vendor guidance{}",
            p.source_ref
                .as_deref()
                .map(|r| format!(" ({})", redact_url(r)))
                .unwrap_or_default()
        ),
    };
    if let Some(by) = &p.approved_by {
        s.push_str(&format!(", approved by {by}"));
        if let Some(at) = &p.approved_at {
            s.push_str(&format!(" at {at}"));
        }
    }
    if let Some(id) = p.proposal {
        s.push_str(&format!(" (proposal #{id})"));
    }
    s
}

/// Renders documents for every agent in a catalog.
pub struct Renderer {
    catalog: AgentCatalog,
    env: Environment<'static>,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("agents", &self.catalog.names())
            .finish()
    }
}

fn template_error(name: &str, e: &minijinja::Error) -> RulesError {
    let mut message = e.to_string();
    if let Some(detail) = e.detail()
        && !message.contains(detail)
    {
        message.push_str(": ");
        message.push_str(detail);
    }
    RulesError::Template {
        name: name.to_string(),
        message,
    }
}

impl Renderer {
    /// A renderer with the built-in agents and templates.
    pub fn builtin() -> Self {
        // The built-in templates are part of the crate and tested; failing here is a bug.
        Self::new(AgentCatalog::builtin()).expect("the built-in templates compile")
    }

    /// A renderer for a catalog: built-in templates, replaced or extended by the catalog's
    /// templates folder.
    pub fn new(catalog: AgentCatalog) -> Result<Self, RulesError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .map_err(|e| template_error("syntax", &e))?;
        env.set_syntax(syntax);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_filter("yaml_text", yaml_text);
        env.add_template("_common.j2", COMMON)
            .map_err(|e| template_error("_common.j2", &e))?;
        for (agent, source) in BUILTIN_TEMPLATES {
            let name = format!("{agent}.j2");
            env.add_template_owned(name.clone(), *source)
                .map_err(|e| template_error(&name, &e))?;
        }
        for target in catalog.targets() {
            if let Some(path) = &target.custom_template {
                let source = std::fs::read_to_string(path).map_err(|e| RulesError::io(path, e))?;
                let name = format!("{}.j2", target.name);
                env.add_template_owned(name.clone(), source)
                    .map_err(|e| template_error(&path.display().to_string(), &e))?;
            }
        }
        Ok(Self { catalog, env })
    }

    /// The catalog of agents this renderer serves.
    pub fn catalog(&self) -> &AgentCatalog {
        &self.catalog
    }

    /// Renders the full document for one agent.
    pub fn render(
        &self,
        project_id: &str,
        doc: &RulesDocument,
        agent: &str,
    ) -> Result<Rendered, RulesError> {
        let target = self.catalog.get(agent)?;
        let view = build_view(project_id, doc, target);
        let name = format!("{}.j2", target.name);
        let template = self
            .env
            .get_template(&name)
            .map_err(|e| template_error(&name, &e))?;
        let raw = template
            .render(minijinja::Value::from(minijinja::value::Serde(&Context {
                view,
            })))
            .map_err(|e| template_error(&name, &e))?;
        Ok(Rendered {
            agent: target.name.clone(),
            path: target.output.clone(),
            content: normalize(&raw),
        })
    }

    /// Whether writing `rendered` under `root` would replace a file Bridle did not write: one
    /// that exists, differs, and has no [`GENERATED_MARK`] (a project's own `CLAUDE.md` or
    /// `AGENTS.md`, written by hand). A renderer that writes files should not replace such a
    /// file without being told to: what it says would be lost. A file that is not text, or
    /// not a file, counts as not Bridle's.
    ///
    /// ```
    /// use bridle_rules::{Rendered, Renderer};
    /// let root = std::env::temp_dir().join(format!("bridle-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&root).unwrap();
    /// let rendered = Rendered {
    ///     agent: "claude".into(),
    ///     path: "CLAUDE.md".into(),
    ///     content: "<!-- Generated by Bridle ... -->\n".into(),
    /// };
    /// assert!(!Renderer::replaces_foreign_file(&root, &rendered).unwrap()); // nothing there
    /// std::fs::write(root.join("CLAUDE.md"), "# Our own notes\n").unwrap();
    /// assert!(Renderer::replaces_foreign_file(&root, &rendered).unwrap());
    /// std::fs::write(root.join("CLAUDE.md"), "<!-- Generated by Bridle, revision 1 -->\n").unwrap();
    /// assert!(!Renderer::replaces_foreign_file(&root, &rendered).unwrap());
    /// std::fs::remove_dir_all(&root).unwrap();
    /// ```
    pub fn replaces_foreign_file(root: &Path, rendered: &Rendered) -> Result<bool, RulesError> {
        let path = root.join(&rendered.path);
        let on_disk = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            // A directory (or anything else that is not a readable file) is not Bridle's.
            Err(_) if path.exists() => return Ok(true),
            Err(e) => return Err(RulesError::io(&path, e)),
        };
        if on_disk == rendered.content.as_bytes() {
            return Ok(false);
        }
        Ok(!std::str::from_utf8(&on_disk).is_ok_and(|text| text.contains(GENERATED_MARK)))
    }

    /// Compares a rendered file with what is on disk under `root`. `None` when they match;
    /// otherwise a unified diff (from disk to the canonical render).
    pub fn check(root: &Path, rendered: &Rendered) -> Result<Option<String>, RulesError> {
        let path = root.join(&rendered.path);
        let on_disk = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(RulesError::io(&path, e)),
        };
        if on_disk == rendered.content {
            return Ok(None);
        }
        Ok(Some(unified_diff(
            &on_disk,
            &rendered.content,
            &format!("{} (on disk)", rendered.path),
            &format!("{} (canonical)", rendered.path),
        )))
    }
}

/// The words that mark a file as written by Bridle: the built-in templates' notice
/// (`view.generated`) starts with them, and a custom template that shows the notice (or the
/// words) marks its files too ([`Renderer::replaces_foreign_file`]).
pub const GENERATED_MARK: &str = "Generated by Bridle";

/// How long [`unified_diff`] looks for the shortest diff. Myers' algorithm takes time in the
/// product of the texts' lengths and the number of changed lines: two unrelated texts of a
/// megabyte each would take minutes. Past the deadline the rest of the texts is diffed
/// coarsely (longer hunks), which is still a whole, correct diff.
pub const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// A unified diff (three lines of context) from `old` to `new`, headed `old_name` and
/// `new_name`; empty when they are equal. Computed within [`DIFF_DEADLINE`], so its time is
/// bounded whatever the texts.
///
/// ```
/// let diff = bridle_rules::unified_diff("a\nb\n", "a\nc\n", "old", "new");
/// assert!(diff.starts_with("--- old\n+++ new\n"));
/// assert!(diff.contains("-b\n+c\n"));
/// assert_eq!(bridle_rules::unified_diff("same\n", "same\n", "old", "new"), "");
/// ```
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

fn build_view<'a>(
    project_id: &'a str,
    doc: &'a RulesDocument,
    target: &'a AgentTarget,
) -> View<'a> {
    let mut enforcement = Vec::new();
    let mut hard_instructions = Vec::new();
    let mut guidance = Vec::new();
    for g in doc
        .guardrails
        .iter()
        .filter(|g| g.applies_to_agent(&target.name))
    {
        let v = GuardrailView {
            id: &g.id,
            statement: g.statement.trim(),
            severity: g.severity.as_str(),
            provenance: provenance_text(g),
        };
        match g.severity {
            Severity::Enforcement => enforcement.push(v),
            Severity::HardInstruction => hard_instructions.push(v),
            Severity::Guidance => guidance.push(v),
        }
    }
    let capabilities = doc
        .agent_profiles
        .get(&target.name)
        .map(|p| p.capabilities.as_slice())
        .unwrap_or(&[]);
    View {
        project_id,
        generated: format!(
            "{GENERATED_MARK} from the canonical rules of project `{project_id}` (revision {}, schema {}). Do not edit this file: change the rules through Bridle and render again.",
            doc.revision, doc.schema_version
        ),
        revision: doc.revision,
        schema_version: doc.schema_version,
        agent: AgentView {
            name: &target.name,
            display: &target.display,
            output: &target.output,
            stepwise: target.style == Style::Stepwise,
        },
        project: &doc.project,
        enforcement,
        hard_instructions,
        guidance,
        patterns: shown_patterns(&doc.patterns),
        permissions: doc.permissions_of(&target.name),
        capabilities,
    }
}

/// `patterns` as a rendered file may show them: an example repository's URL can carry an access
/// token (`https://bot:<token>@host/...`, or one in its query), and the files are read by
/// agents and committed with the project, so each URL is shown as [`redact_url`] shows it, to
/// custom templates as well.
fn shown_patterns(patterns: &Patterns) -> Patterns {
    let mut shown = patterns.clone();
    for repo in shown
        .custom
        .iter_mut()
        .flat_map(|p| p.example_repos.iter_mut())
    {
        repo.url = redact_url(&repo.url);
    }
    shown
}

/// `text` as a YAML scalar in a block mapping (the front matter of Cursor's and Windsurf's
/// files): as it is when YAML reads it back as that same text, else double-quoted with JSON's
/// escapes (which YAML's double quotes share). A project called `Shop: Backend` written plain
/// would make `description: ... Shop: Backend` a YAML error, and the agent might then not
/// apply the file at all; a line break in it could add a key of its own.
fn yaml_text(text: &str) -> String {
    const INDICATORS: &str = "-?:,[]{}#&*!|>'\"%@`";
    let odd =
        |c: char| c.is_control() || matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}');
    let special = matches!(
        text.to_ascii_lowercase().as_str(),
        "true" | "false" | "null" | "~" | "yes" | "no" | "on" | "off" | "y" | "n"
    ) || text.parse::<f64>().is_ok()
        // Numbers YAML reads that Rust's parser does not: `0x1F`, `0o17`, `1_000`, `+.5`, dates.
        || text.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '.');
    let plain = !text.is_empty()
        && text.trim() == text
        && !text.starts_with(|c: char| INDICATORS.contains(c))
        && !text.contains(": ")
        && !text.contains(" #")
        && !text.ends_with(':')
        && !text.contains(odd)
        && !special;
    if plain {
        return text.to_string();
    }
    let quoted = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string());
    // JSON leaves these as they are; some YAML readers take them for line breaks.
    quoted
        .replace('\u{85}', "\\u0085")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
        .replace('\u{feff}', "\\ufeff")
}

/// Trailing spaces removed, at most one blank line in a row, no leading blank lines, exactly
/// one final newline.
fn normalize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut blank_run = 0;
    for line in raw.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    if out.is_empty() {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two unrelated texts of about 1 MiB each: every line is removed and every line added,
    /// and the diff says so (past the deadline it is coarser, never wrong). Without the
    /// deadline this took over a minute in a test build.
    #[test]
    fn a_diff_of_two_unrelated_large_texts_is_whole() {
        let old: String = (0..40_000)
            .map(|i| format!("old line {i} {}\n", "x".repeat(16)))
            .collect();
        let new: String = (0..40_000)
            .map(|i| format!("new line {i} {}\n", "y".repeat(16)))
            .collect();
        let diff = unified_diff(&old, &new, "a", "b");
        let removed = diff
            .lines()
            .filter(|l| l.starts_with('-') && !l.starts_with("---"))
            .count();
        let added = diff
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .count();
        assert_eq!((removed, added), (40_000, 40_000));
        assert!(diff.starts_with("--- a\n+++ b\n"));
    }

    #[test]
    fn yaml_text_reads_back_as_the_same_text() {
        for text in [
            "Canonical project rules for Shop, generated by Bridle",
            "Shop: Backend #2",
            "a:b",
            "ends with colon:",
            "- dash",
            "#hash",
            "\"quoted\"",
            "'single'",
            "back\\slash",
            "line\nbreak",
            "tab\there",
            " padded ",
            "",
            "~",
            "null",
            "Null",
            "yes",
            "true",
            "0x1F",
            "0o17",
            "1_000",
            "2001-12-14",
            ".inf",
            "+.5",
            "12",
            "sep\u{2028}arator",
            "é ü ✓",
            "[flow] {map} & *alias !tag |bar >fold %pct @at `tick",
        ] {
            let line = format!("k: {}\n", yaml_text(text));
            let read: std::collections::BTreeMap<String, serde_json::Value> =
                serde_saphyr::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(read["k"], serde_json::Value::from(text), "{line:?}");
        }
        assert_eq!(yaml_text("Shop"), "Shop");
    }

    #[test]
    fn normalize_collapses_blank_runs() {
        assert_eq!(normalize("\n\na  \n\n\n\nb\n\n"), "a\n\nb\n");
        assert_eq!(normalize(""), "\n");
    }
}
