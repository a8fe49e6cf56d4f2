//! The `upstreams:` section of `bridle.yaml`: which MCP servers the gateway routes agents to,
//! which projects each serves, and where its credential goes.
//!
//! Everything that can be refused is refused here, at start, naming the upstream: a transport
//! that is neither `stdio` nor `http` (or both), a URL carrying credentials (a user part or a
//! query, which would reach log lines: credentials go under `credential:`), a credential
//! template without exactly one `{secret}`, a header name or value HTTP does not allow, an
//! environment variable name a shell would not set (or a `BRIDLE_*` one to inherit), a
//! `per_agent` entry for an agent the configuration does not name, a credential that goes
//! nowhere (a header on a child process, an environment variable on an HTTP endpoint).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The placeholder a credential template replaces with the secret.
pub const SECRET_PLACEHOLDER: &str = "{secret}";

/// How long a forwarded call may take when the upstream names no timeout.
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 60;

/// The variables of the gateway's own environment a stdio upstream starts with (those that are
/// set): what a program needs to find other programs and its home, speak the locale, tell the
/// time, make temporary files, trust the operator's certificate authorities (OpenSSL's
/// variables, and those Python's `requests` and Node read instead) and reach the network
/// through the operator's proxy. Nothing else is inherited, so a secret the operator exported
/// before starting the gateway (`BRIDLE_ADMIN_TOKEN`, `BRIDLE_MASTER_KEY`, a cloud key) reaches
/// no child. A child that needs more has it named in its `stdio.inherit_env` (or set in
/// `stdio.env`). A proxy URL with a password in it is handed on with the proxy variables.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// The variables a Windows program cannot start or find its folders without, inherited there
/// besides [`INHERITED_ENV`].
#[cfg(windows)]
const INHERITED_ENV_WINDOWS: &[&str] = &[
    "SYSTEMROOT",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
];

/// One upstream MCP server, as `bridle.yaml` names it under `upstreams.<namespace>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    /// A child process spoken to over stdio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<StdioSection>,
    /// A Streamable HTTP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSection>,
    /// The projects it serves; empty means every project. An agent reaches its tools only
    /// through a project it may use, with that project's `permissions.<type>.<namespace>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    /// Where its credential comes from and where it goes; none for an upstream that needs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<CredentialSection>,
    /// Upstream tool names (or `prefix*` patterns) that count as reads although the upstream
    /// does not mark them `readOnlyHint: true`. Every other tool counts as a write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// How long one forwarded call may take, in seconds (default 60, at most 86,400).
    #[serde(default = "default_timeout")]
    pub call_timeout_secs: u64,
    /// Whether the gateway routes to it (an operator may disable it).
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn default_timeout() -> u64 {
    DEFAULT_CALL_TIMEOUT_SECS
}
fn yes() -> bool {
    true
}

/// A child-process upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdioSection {
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables that are not secrets (a URL, a log level). Secrets go through
    /// `credential.env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables of the gateway's own environment the child inherits besides
    /// [`INHERITED_ENV`] (say `JAVA_HOME`). The child starts with a cleared environment: these,
    /// the allowed ones, `env` and the credential are all it gets. A `BRIDLE_*` name is refused:
    /// the gateway's own settings and keys are never handed on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
    /// What becomes of the child's standard error: `log` (the default: each line a log event
    /// under `kberg_server::aggregate::child_stderr`, the credential redacted), `inherit` (the
    /// gateway's own stderr, unfiltered) or `discard`.
    #[serde(default, skip_serializing_if = "StderrMode::is_default")]
    pub stderr: StderrMode,
}

/// What becomes of a child-process upstream's standard error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StderrMode {
    /// Logged line by line, the credential redacted.
    #[default]
    Log,
    /// Written to the gateway's own stderr, unfiltered (a child that prints its credential
    /// then prints it there).
    Inherit,
    /// Dropped.
    Discard,
}

impl StdioSection {
    /// The names of the gateway's variables the child starts with: [`INHERITED_ENV`] (on
    /// Windows, with the variables a program there needs to start) and `inherit_env`.
    pub fn inherited_env(&self) -> Vec<String> {
        let mut names: Vec<String> = INHERITED_ENV.iter().map(|n| n.to_string()).collect();
        #[cfg(windows)]
        names.extend(INHERITED_ENV_WINDOWS.iter().map(|n| n.to_string()));
        for n in &self.inherit_env {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}

impl StderrMode {
    fn is_default(&self) -> bool {
        *self == StderrMode::Log
    }

    /// The aggregator's setting for this mode.
    pub fn child_stderr(self) -> kberg_server::aggregate::ChildStderr {
        match self {
            StderrMode::Log => kberg_server::aggregate::ChildStderr::Log,
            StderrMode::Inherit => kberg_server::aggregate::ChildStderr::Inherit,
            StderrMode::Discard => kberg_server::aggregate::ChildStderr::Discard,
        }
    }
}

/// A Streamable HTTP upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// The endpoint, e.g. `http://127.0.0.1:8080/mcp`, without a user part or a query (both
    /// refused: the URL reaches log lines; credentials go under `credential`).
    pub url: String,
}

/// Where an upstream's credential comes from and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSection {
    /// The secret every agent's calls use (a name in the gateway's secret source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// One secret per agent (agent name → secret name), so the upstream's own audit shows which
    /// agent acted. An agent without an entry (and no `secret`) is refused
    /// `credential_missing`; nothing is sent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_agent: BTreeMap<String, String>,
    /// HTTP: the header that carries it (default `Authorization`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// HTTP: the header's value, with `{secret}` where the secret goes (default
    /// `Bearer {secret}`; Gitea takes `token {secret}`, GitLab's header `PRIVATE-TOKEN` takes
    /// `{secret}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// stdio: the environment variable of the child that carries it (`GITEA_ACCESS_TOKEN` for
    /// the official Go `gitea-mcp`, `GITEA_TOKEN` for the Python one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// Where a checked credential goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialTarget {
    /// A header with a template.
    Header {
        /// The header name, lowercase.
        name: String,
        /// The value template with one `{secret}`.
        format: String,
    },
    /// An environment variable of the child.
    Env(String),
}

impl CredentialTarget {
    /// Renders the header value or variable value for `secret`.
    pub fn render(&self, secret: &str) -> String {
        match self {
            CredentialTarget::Header { format, .. } => {
                format.replacen(SECRET_PLACEHOLDER, secret, 1)
            }
            CredentialTarget::Env(_) => secret.to_string(),
        }
    }
}

/// Why an `upstreams:` entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream `{namespace}`: {message}")]
pub struct UpstreamConfigError {
    /// The upstream.
    pub namespace: String,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl UpstreamSection {
    /// The call timeout.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_secs)
    }

    /// What becomes of a child's standard error (`log` for HTTP upstreams, where it is unused).
    pub fn stderr(&self) -> kberg_server::aggregate::ChildStderr {
        self.stdio
            .as_ref()
            .map_or(StderrMode::Log, |s| s.stderr)
            .child_stderr()
    }

    /// Whether it serves `project`.
    pub fn serves(&self, project: &str) -> bool {
        self.projects.is_empty() || self.projects.iter().any(|p| p == project)
    }

    /// Whether the upstream tool `remote` (its own name, without namespace) is configured as a
    /// read.
    pub fn listed_as_read(&self, remote: &str) -> bool {
        self.reads.iter().any(|r| match r.strip_suffix('*') {
            Some(prefix) => remote.starts_with(prefix),
            None => r == remote,
        })
    }

    /// Checks the entry against the configured agent names; returns where the credential goes.
    pub fn check(
        &self,
        namespace: &str,
        agents: &BTreeSet<String>,
    ) -> Result<Option<CredentialTarget>, UpstreamConfigError> {
        let bad = |message: String| UpstreamConfigError {
            namespace: namespace.to_string(),
            message,
        };
        let valid_ns = !namespace.is_empty()
            && namespace.len() <= 32
            && namespace
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase())
            && namespace
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid_ns {
            return Err(bad(
                "the namespace must be 1 to 32 lowercase letters, digits or dashes, starting with a letter".into(),
            ));
        }
        match (&self.stdio, &self.http) {
            (Some(_), Some(_)) => return Err(bad("name `stdio` or `http`, not both".into())),
            (None, None) => {
                return Err(bad(
                    "name how to reach it: `stdio: {command: ...}` or `http: {url: ...}`".into(),
                ));
            }
            (Some(s), None) if s.command.trim().is_empty() => {
                return Err(bad("`stdio.command` is empty".into()));
            }
            (None, Some(h)) if !(h.url.starts_with("http://") || h.url.starts_with("https://")) => {
                return Err(bad(format!(
                    "`http.url` must start with http:// or https:// (got `{}`)",
                    bridle_rules::redact_url(&h.url)
                )));
            }
            (None, Some(h)) => check_http_url(&h.url).map_err(bad)?,
            _ => {}
        }
        if let Some(s) = &self.stdio {
            for k in s.env.keys() {
                check_env_name(k).map_err(|m| bad(format!("`stdio.env`: {m}")))?;
            }
            for k in &s.inherit_env {
                check_env_name(k).map_err(|m| bad(format!("`stdio.inherit_env`: {m}")))?;
                if k.to_ascii_uppercase().starts_with("BRIDLE_") {
                    return Err(bad(format!(
                        "`stdio.inherit_env` names `{k}`: the gateway's own variables are never \
                         handed to an upstream; set what the child needs in `stdio.env` (or, for \
                         a secret, `credential`)"
                    )));
                }
            }
        }
        if self.call_timeout_secs == 0 {
            return Err(bad("`call_timeout_secs` must be at least 1".into()));
        }
        let longest = kberg_server::aggregate::MAX_CALL_TIMEOUT.as_secs();
        if self.call_timeout_secs > longest {
            return Err(bad(format!(
                "`call_timeout_secs` must be at most {longest} (a day); a call still unanswered \
                 then is stuck"
            )));
        }
        for p in &self.projects {
            bridle_rules::check_name("project", p).map_err(|e| bad(e.to_string()))?;
        }
        for r in &self.reads {
            let stem = r.strip_suffix('*').unwrap_or(r);
            if stem.is_empty() || stem.contains('*') {
                return Err(bad(format!(
                    "`reads` entry `{r}`: name a tool, or a prefix followed by one `*`"
                )));
            }
        }
        let Some(c) = &self.credential else {
            return Ok(None);
        };
        if c.secret.is_none() && c.per_agent.is_empty() {
            return Err(bad(
                "`credential` names no secret: set `secret` (one for every agent) or `per_agent`"
                    .into(),
            ));
        }
        for (agent, secret) in &c.per_agent {
            if !agents.contains(agent) {
                return Err(bad(format!(
                    "`credential.per_agent` names `{agent}`, which is not a configured agent"
                )));
            }
            if secret.trim().is_empty() {
                return Err(bad(format!(
                    "`credential.per_agent.{agent}` names no secret"
                )));
            }
        }
        if let Some(s) = &c.secret
            && s.trim().is_empty()
        {
            return Err(bad("`credential.secret` is empty".into()));
        }
        let target = if self.stdio.is_some() {
            if c.header.is_some() || c.format.is_some() {
                return Err(bad(
                    "a child process takes its credential in an environment variable: use `credential.env`, not `header`/`format`".into(),
                ));
            }
            let Some(env) = &c.env else {
                return Err(bad(
                    "name the environment variable that carries the credential: `credential.env`"
                        .into(),
                ));
            };
            check_env_name(env).map_err(|m| bad(format!("`credential.env`: {m}")))?;
            CredentialTarget::Env(env.clone())
        } else {
            if c.env.is_some() {
                return Err(bad(
                    "an HTTP upstream takes its credential in a header: use `credential.header` and `format`, not `env`".into(),
                ));
            }
            let name = c
                .header
                .clone()
                .unwrap_or_else(|| "authorization".into())
                .to_ascii_lowercase();
            if axum::http::HeaderName::try_from(name.as_str()).is_err() {
                return Err(bad(format!(
                    "`credential.header` `{name}` is not a valid HTTP header name"
                )));
            }
            let format = c.format.clone().unwrap_or_else(|| "Bearer {secret}".into());
            if format.matches(SECRET_PLACEHOLDER).count() != 1 {
                return Err(bad(format!(
                    "`credential.format` must contain `{SECRET_PLACEHOLDER}` exactly once (got `{format}`)"
                )));
            }
            let probe = format.replacen(SECRET_PLACEHOLDER, "x", 1);
            if axum::http::HeaderValue::try_from(probe).is_err() {
                return Err(bad(
                    "`credential.format` has characters an HTTP header value cannot carry".into(),
                ));
            }
            CredentialTarget::Header { name, format }
        };
        Ok(Some(target))
    }
}

/// Refuses an upstream URL that carries credentials: a user part (`https://bot:token@host/`)
/// or a query (`?token=...`). The URL is not a secret: rmcp logs its transport's errors, and
/// the HTTP client's error text names the URL with its query. Credentials belong under the
/// upstream's `credential:`, which sends them in a header. The message never quotes the URL.
fn check_http_url(url: &str) -> Result<(), String> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Err("`http.url` is not a valid URL".into());
    };
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("`http.url` names no host".into());
    }
    let part = if !parsed.username().is_empty() || parsed.password().is_some() {
        "a user part (`user:password@`)"
    } else if parsed.query().is_some() {
        "a query (`?...`)"
    } else {
        return Ok(());
    };
    Err(format!(
        "`http.url` has {part}, which would reach log lines and error messages: put the \
         credential in the upstream's `credential:` setting (`secret` with `header` and \
         `format`), which sends it in a header, and remove it from the URL"
    ))
}

fn check_env_name(name: &str) -> Result<(), String> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not an environment variable name (letters, digits, `_`; not starting with a digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn agents() -> BTreeSet<String> {
        ["claude".to_string(), "codex".to_string()].into()
    }

    fn parse(yaml: &str) -> UpstreamSection {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn good_entries_say_where_the_credential_goes() {
        let http = parse(
            "http: {url: 'http://127.0.0.1:9/mcp'}\ncredential: {secret: t, format: 'token {secret}'}",
        );
        assert_eq!(
            http.check("gitea", &agents()).unwrap(),
            Some(CredentialTarget::Header {
                name: "authorization".into(),
                format: "token {secret}".into()
            })
        );
        let stdio = parse(
            "stdio: {command: gitea-mcp}\ncredential: {per_agent: {claude: a, codex: b}, env: GITEA_ACCESS_TOKEN}",
        );
        assert_eq!(
            stdio.check("gitea", &agents()).unwrap(),
            Some(CredentialTarget::Env("GITEA_ACCESS_TOKEN".into()))
        );
        assert_eq!(
            CredentialTarget::Header {
                name: "private-token".into(),
                format: "{secret}".into()
            }
            .render("s3"),
            "s3"
        );
        assert!(
            parse("http: {url: 'http://x/'}\nreads: [list_*, get_me]").listed_as_read("list_repos")
        );
        let child = parse("stdio: {command: x, inherit_env: [JAVA_HOME, PATH]}");
        assert!(child.check("node", &agents()).is_ok());
        let inherited = child.stdio.unwrap().inherited_env();
        assert!(inherited.iter().any(|n| n == "JAVA_HOME"));
        assert_eq!(inherited.iter().filter(|n| *n == "PATH").count(), 1);
        assert!(!inherited.iter().any(|n| n.starts_with("BRIDLE_")));
    }

    #[test]
    fn bad_entries_are_refused_naming_the_upstream() {
        let cases = [
            ("http: {url: 'http://x/'}\nstdio: {command: x}", "not both"),
            ("projects: [demo]", "how to reach it"),
            ("http: {url: 'ftp://x/'}", "http://"),
            ("stdio: {command: ' '}", "empty"),
            (
                "http: {url: 'http://x/'}\ncredential: {secret: t, format: 'token'}",
                "exactly once",
            ),
            (
                "http: {url: 'http://x/'}\ncredential: {secret: t, format: '{secret} {secret}'}",
                "exactly once",
            ),
            (
                "http: {url: 'http://x/'}\ncredential: {secret: t, header: 'bad header'}",
                "not a valid HTTP header",
            ),
            (
                "http: {url: 'http://x/'}\ncredential: {secret: t, env: X}",
                "header",
            ),
            (
                "stdio: {command: x}\ncredential: {secret: t}",
                "credential.env",
            ),
            (
                "stdio: {command: x}\ncredential: {secret: t, env: '1X'}",
                "environment variable",
            ),
            (
                "stdio: {command: x}\ncredential: {secret: t, env: X, header: h}",
                "environment variable",
            ),
            (
                "stdio: {command: x}\ncredential: {per_agent: {stranger: s}, env: X}",
                "not a configured agent",
            ),
            (
                "stdio: {command: x}\ncredential: {env: X}",
                "names no secret",
            ),
            (
                "http: {url: 'http://x/'}\ncall_timeout_secs: 0",
                "at least 1",
            ),
            (
                "http: {url: 'http://x/'}\ncall_timeout_secs: 86401",
                "at most 86400",
            ),
            (
                "http: {url: 'http://x/'}\ncall_timeout_secs: 18446744073709551615",
                "at most 86400",
            ),
            ("http: {url: 'http://x/'}\nreads: ['a*b*']", "reads"),
            (
                "stdio: {command: x, inherit_env: ['NODE EXTRA']}",
                "`stdio.inherit_env`",
            ),
            (
                "stdio: {command: x, inherit_env: [BRIDLE_ADMIN_TOKEN]}",
                "never handed to an upstream",
            ),
            (
                "stdio: {command: x, inherit_env: [bridle_master_key]}",
                "never handed to an upstream",
            ),
        ];
        for (yaml, needle) in cases {
            let err = parse(yaml).check("gitea", &agents()).unwrap_err();
            assert_eq!(err.namespace, "gitea");
            assert!(err.to_string().contains(needle), "{yaml}: {err}");
        }
        let err = parse("http: {url: 'http://x/'}")
            .check("Bad_NS", &agents())
            .unwrap_err();
        assert!(err.message.contains("namespace"));
    }

    /// A URL with credentials in it is refused, naming the upstream and the key, never quoting
    /// the URL: the HTTP client's errors name the URL with its query, and rmcp logs them.
    #[test]
    fn credentials_in_an_upstream_url_are_refused_without_quoting_them() {
        let cases = [
            ("https://bot:canary-pass-1@mcp.example/mcp", "user part"),
            ("https://canary-user-2@mcp.example/mcp", "user part"),
            ("https://:canary-pass-3@mcp.example/mcp", "user part"),
            ("https://mcp.example/mcp?token=canary-query-4", "query"),
            ("https://mcp.example/mcp?canary-query-5", "query"),
            ("http://mcp.example/mcp?", "query"),
            ("ftp://bot:canary-pass-6@mcp.example/", "http://"),
            ("http://bot:canary-pass-7@[::1/", "not a valid URL"),
        ];
        for (url, needle) in cases {
            let yaml = format!("http: {{url: '{url}'}}\ncredential: {{secret: t}}");
            let err = parse(&yaml).check("tickets", &agents()).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("upstream `tickets`: "), "{text}");
            assert!(text.contains(needle), "{url}: {text}");
            assert!(!text.contains("canary"), "{url}: {text}");
            if needle != "http://" && needle != "not a valid URL" {
                assert!(text.contains("`http.url`") && text.contains("`credential:`"));
            }
        }
        for url in [
            "https://mcp.example/mcp",
            "http://127.0.0.1:8080/v1/mcp",
            "https://mcp.example/a@b",
        ] {
            let yaml = format!("http: {{url: '{url}'}}");
            assert!(parse(&yaml).check("tickets", &agents()).is_ok(), "{url}");
        }
    }
}
