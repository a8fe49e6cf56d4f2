//! Fetching an example repository and choosing the files worth indexing.
//!
//! A source is either a local directory (indexed as it is on disk, uncommitted changes
//! included) or something git can clone (a URL, `git@host:path`, a `file://` URL), which is
//! cloned shallowly (`git clone --depth 1`) into a temporary directory that is removed when the
//! [`Checkout`] is dropped. git never prompts: a private repository fails with a clear error
//! instead of hanging on a credentials prompt. A private repository's credential need not be
//! written into its URL (and so into the rules document): a [`GitAuth`] for its site, which the
//! gateway builds from a secret it keeps, goes to git as an HTTP header for that site only,
//! through git's environment, never its command line.
//!
//! [`collect_files`] walks the tree with the `ignore` crate, so `.gitignore`, `.ignore` and
//! global git excludes are honoured and hidden files are skipped (ignored files, local
//! configuration with secrets among them, are never read, embedded or sent to an embedder). It
//! keeps text files of code and documentation, skipping what would only add noise to search: version-control and dependency folders (`.git`,
//! `node_modules`, `vendor`, `target`, ...), lock files, minified and generated files (by name,
//! or by an `@generated` / `Code generated ... DO NOT EDIT` marker near the top), binary files
//! (a NUL byte, or not UTF-8) and files over a size limit. An ignore file that is a link
//! leading out of the tree (to a host's file, or to `/dev/zero`, which never ends) or is larger
//! than one written by hand is never read: the walk stops there and indexing fails.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{MemoryError, Result};
use crate::patterns::LimitNames;

/// A repository ready to read: a local directory, or a temporary shallow clone.
#[derive(Debug)]
pub struct Checkout {
    root: PathBuf,
    // Held so the clone is deleted when the checkout is dropped.
    _temp: Option<tempfile::TempDir>,
}

impl Checkout {
    /// The directory to walk.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Whether `source` names something to clone rather than a local directory.
fn is_remote(source: &str) -> bool {
    source.contains("://") || (source.starts_with("git@") && source.contains(':'))
}

/// Whether `source` is a network git URL: `https://host/...`, `ssh://host/...` or scp-like
/// `git@host:path`, with a host name and nothing a shell or git could read as an option or a
/// second argument (no whitespace or control character, no leading `-`). A local directory, a
/// `file://` URL and every other transport (`http://`, `git://`, `ext::`) are not.
///
/// [`fetch`] takes any of them; this is for sources an agent proposes, which once a person
/// approves them are fetched on the gateway's host and indexed for every agent: a local path or
/// a `file://` URL there would index the host's own files. A person adds local sources from the
/// command line or the admin API.
///
/// ```
/// use bridle_memory::repo::is_network_source;
///
/// assert!(is_network_source("https://git.example/team/app.git"));
/// assert!(is_network_source("ssh://git@git.example/team/app.git"));
/// assert!(is_network_source("git@git.example:team/app.git"));
/// assert!(!is_network_source("/var/lib/bridle"));
/// assert!(!is_network_source("."));
/// assert!(!is_network_source("file:///var/lib/bridle"));
/// ```
pub fn is_network_source(source: &str) -> bool {
    if source.is_empty()
        || source.starts_with('-')
        || source.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return false;
    }
    // A host name, an IPv4 address or an IPv6 one in brackets, and a port after `:` for a URL.
    let host_ok = |host: &str, port: bool| {
        let mut chars = host.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '[')
            && host.chars().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(c, '.' | '-' | '_')
                    || (port && matches!(c, ':' | '[' | ']'))
            })
    };
    if let Some(rest) = source
        .strip_prefix("https://")
        .or_else(|| source.strip_prefix("ssh://"))
    {
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let host = authority
            .rfind('@')
            .map_or(authority, |at| &authority[at + 1..]);
        return host_ok(host, true);
    }
    if let Some(rest) = source.strip_prefix("git@") {
        // git reads `git@host:path` as scp-like only when no `/` comes before the `:`.
        return rest
            .split_once(':')
            .is_some_and(|(host, path)| host_ok(host, false) && !path.is_empty());
    }
    false
}

/// `source` as it may be shown: a URL's user part (`https://user:token@host/...`, where a
/// private repository's access token goes) as `***@`, its query as `?***` and a fragment as
/// `#***`; an scp-like `git@host:path` and a local path are shown as they are. This is
/// kberg-core's [`redact_source`](kberg_core::redact_source). Everything a repository source
/// reaches outside memory (search results, listings, progress, errors, log lines) goes through
/// this, and so does the source stored with an index's chunks.
///
/// ```
/// use bridle_memory::repo::redact_url;
///
/// assert_eq!(
///     redact_url("https://x-access-token:s3cret@git.example/team/app.git"),
///     "https://***@git.example/team/app.git"
/// );
/// assert_eq!(redact_url("https://host/r.git?private_token=s3cret"), "https://host/r.git?***");
/// assert_eq!(redact_url("git@host:team/app.git"), "git@host:team/app.git");
/// assert_eq!(redact_url("/srv/repos/app"), "/srv/repos/app");
/// ```
pub fn redact_url(source: &str) -> String {
    kberg_core::redact_source(source)
}

/// `text` (what git said about cloning `source`) with every credential of the clone replaced
/// by `[redacted]`: those of `source`'s URL, its user part and query values, as written and
/// decoded ([`UrlCredentials::of_source`](kberg_core::UrlCredentials::of_source); nothing for an
/// scp-like source or a path), and those of the [`GitAuth`] sent with it, if any
/// ([`GitAuth::credentials`]). A host, or a proxy in front of it, may quote what it refused in
/// the message git prints (`fatal: remote error: ...`), as services do. Then each control
/// character, bidirectional control and line separator is written as its escape
/// ([`kberg_core::escaped_when_quoted`]): that message is the host's text, and whoever gets
/// the error prints it (a terminal, a log, a panel, a model's context), where an ESC sequence
/// or a carriage return would rewrite what is shown and a U+202E or U+2066 reorder it.
fn scrub(text: &str, source: &str, auth: Option<&kberg_core::UrlCredentials>) -> String {
    let text = kberg_core::UrlCredentials::of_source(source).scrub(text);
    let text = match auth {
        Some(auth) => auth.scrub(&text),
        None => text,
    };
    kberg_core::quote_escaped(&text, usize::MAX).0
}

/// How much of the line git said last an error quotes, in characters: the reason a clone
/// failed fits in far less, but a host's `remote:` line is as long as the host makes it.
const MAX_QUOTED_GIT_CHARS: usize = 500;

/// The HTTP authorization a clone sends to one site (`https://git.example/` or a path under
/// it, such as `https://git.example/team/`), kept out of the repository's URL. git gets it as
/// an `http.<site>.extraHeader` setting in its environment, so it is sent to that site alone
/// and appears on no command line; its `Debug` shows the site only, and the header is wiped
/// from memory when the value is dropped.
///
/// ```
/// use bridle_memory::repo::GitAuth;
///
/// let auth = GitAuth::basic("https://git.example/team", "bridle-bot", "s3cret-token")?;
/// assert_eq!(auth.site(), "https://git.example/team/");
/// assert!(auth.covers("https://git.example/team/app.git"));
/// assert!(!auth.covers("https://git.example/other/app.git"));
/// assert!(!auth.covers("https://elsewhere.example/team/app.git"));
/// // A URL that carries its own credential keeps it.
/// assert!(!auth.covers("https://me:tok@git.example/team/app.git"));
/// assert!(!format!("{auth:?}").contains("s3cret"));
/// // Plain HTTP only to this machine; a newline would end the header early.
/// assert!(GitAuth::basic("http://git.example/", "bot", "tok").is_err());
/// assert!(GitAuth::basic("https://git.example/", "bot", "tok\r\nX-Evil: 1").is_err());
/// # Ok::<(), bridle_memory::MemoryError>(())
/// ```
#[derive(Clone)]
pub struct GitAuth {
    site: reqwest::Url,
    header: zeroize::Zeroizing<String>,
}

impl std::fmt::Debug for GitAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitAuth")
            .field("site", &self.site.as_str())
            .finish_non_exhaustive()
    }
}

impl GitAuth {
    /// HTTP Basic authorization (`username` and `secret`, such as a Gitea user and its access
    /// token) for clones of repositories under `site`. The site is an `https` URL without a
    /// user part, query or fragment (`http` only for a loopback host); neither value may be
    /// empty or hold a control character, nor the user name a `:`. Errors never quote the
    /// secret.
    pub fn basic(site: &str, username: &str, secret: &str) -> Result<Self> {
        use base64::Engine as _;
        let site = Self::site_of(site)?;
        let bad = |c: char| c.is_control();
        if username.is_empty() || username.contains(':') || username.contains(bad) {
            return Err(MemoryError::InvalidInput(
                "a git credential's user name must be non-empty, without `:` or control characters"
                    .into(),
            ));
        }
        if secret.is_empty() || secret.contains(bad) {
            return Err(MemoryError::InvalidInput(
                "a git credential's secret must be non-empty and hold no control character".into(),
            ));
        }
        let pair = zeroize::Zeroizing::new(format!("{username}:{secret}"));
        let encoded =
            zeroize::Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*pair));
        Ok(Self {
            site,
            header: zeroize::Zeroizing::new(format!("Authorization: Basic {}", &*encoded)),
        })
    }

    fn site_of(site: &str) -> Result<reqwest::Url> {
        let invalid = |why: &str| {
            MemoryError::InvalidInput(format!(
                "a git credential's site `{}` {why}",
                redact_url(site)
            ))
        };
        let mut url = reqwest::Url::parse(site.trim()).map_err(|_| invalid("is not a URL"))?;
        let Some(host) = url.host_str() else {
            return Err(invalid("has no host"));
        };
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match url.scheme() {
            "https" => {}
            "http" if loopback => {}
            _ => return Err(invalid("must be an https URL (http only for this machine)")),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("must not hold a user name or password"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("must not hold a query or fragment"));
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        Ok(url)
    }

    /// The values of this authorization a host could quote back: the header, its Basic value,
    /// the `user:secret` pair it encodes and the secret alone (each also as written inside a
    /// JSON string; [`kberg_core::UrlCredentials`]).
    fn credentials(&self) -> kberg_core::UrlCredentials {
        use base64::Engine as _;
        let basic = self
            .header
            .strip_prefix("Authorization: Basic ")
            .unwrap_or_default();
        let pair = zeroize::Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(basic)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default(),
        );
        // A user name holds no `:`, so the secret is all after the first.
        let secret = pair.split_once(':').map_or("", |(_, s)| s);
        let values: Vec<&str> = [self.header.as_str(), basic, pair.as_str(), secret]
            .into_iter()
            .filter(|v| !v.is_empty())
            .collect();
        kberg_core::UrlCredentials::of_urls(&[], &values)
    }

    /// The site, as git matches it (always ending in `/`).
    pub fn site(&self) -> &str {
        self.site.as_str()
    }

    /// Whether a clone of `source` gets this authorization: the same scheme, host and port,
    /// a path under the site's, and no user part of its own.
    pub fn covers(&self, source: &str) -> bool {
        let Ok(url) = reqwest::Url::parse(source.trim()) else {
            return false;
        };
        url.scheme() == self.site.scheme()
            && url.host() == self.site.host()
            && url.port_or_known_default() == self.site.port_or_known_default()
            && url.username().is_empty()
            && url.password().is_none()
            && (url.path() == self.site.path().trim_end_matches('/')
                || url.path().starts_with(self.site.path()))
    }
}

/// Whether a clone of `source` may want a [`GitAuth`]: an `http(s)` URL with a host and no
/// user part of its own.
pub(crate) fn wants_credential(source: &str) -> bool {
    reqwest::Url::parse(source.trim()).is_ok_and(|u| {
        matches!(u.scheme(), "https" | "http")
            && u.host_str().is_some()
            && u.username().is_empty()
            && u.password().is_none()
    })
}

/// Where a clone's credential comes from: asked once for each clone of a network URL that
/// carries no credential of its own, with the example's reference tag (for the owner's
/// record of the use). `Ok(None)`: nothing is configured for the URL's site, and the clone goes
/// without (a private repository then fails with `repo_unavailable`). An error fails the run
/// before anything is cloned; its text is shown, so it must not quote a secret.
pub trait GitCredentials: Send + Sync + std::fmt::Debug {
    /// The authorization for cloning `url`, if any.
    fn for_clone(&self, url: &str, reference_tag: &str) -> Result<Option<GitAuth>>;
}

/// Makes `source` readable: a local directory as is, anything else cloned with
/// `git clone --depth 1` within `timeout`. Errors and log lines name the source as
/// [`redact_url`] shows it.
pub async fn fetch(source: &str, timeout: Duration) -> Result<Checkout> {
    fetch_with(source, None, timeout).await
}

/// [`fetch`], with `auth` sent to its site when it [covers](GitAuth::covers) `source` (and
/// ignored otherwise).
pub async fn fetch_with(
    source: &str,
    auth: Option<&GitAuth>,
    timeout: Duration,
) -> Result<Checkout> {
    fetch_bounded(source, auth, timeout, DEFAULT_MAX_CLONE_BYTES).await
}

/// The most a clone may take on disk unless told otherwise
/// ([`PatternIndexConfig::max_clone_bytes`](crate::PatternIndexConfig::max_clone_bytes)): 4 GiB.
pub const DEFAULT_MAX_CLONE_BYTES: u64 = 4 << 30;

/// [`fetch_with`], with the clone allowed at most `max_bytes` on disk (its `.git` folder and
/// checked-out files together, each file and folder counted as one 4 KiB block at least; a
/// local directory is read where it is and not bounded here).
/// git has no limit of its own on what a clone writes, so the clone's folder is measured while
/// git runs: past the limit git is killed, the partial clone removed, and the fetch fails with
/// [`MemoryError::IndexTooLarge`] naming `PatternIndexConfig::max_clone_bytes`. A clone that
/// finishes between two measures is measured once more and refused the same way.
pub async fn fetch_bounded(
    source: &str,
    auth: Option<&GitAuth>,
    timeout: Duration,
    max_bytes: u64,
) -> Result<Checkout> {
    fetch_bounded_named(source, auth, timeout, max_bytes, &LimitNames::default()).await
}

/// [`fetch_bounded`], its [`MemoryError::IndexTooLarge`] naming the setting
/// [`LimitNames::max_clone_bytes`] gives (a host's own configuration key).
pub(crate) async fn fetch_bounded_named(
    source: &str,
    auth: Option<&GitAuth>,
    timeout: Duration,
    max_bytes: u64,
    names: &LimitNames,
) -> Result<Checkout> {
    fetch_in(
        &std::env::temp_dir(),
        "git",
        source,
        auth,
        timeout,
        max_bytes,
        names,
    )
    .await
}

/// [`fetch_bounded`], cloning with the program `git` into a new folder under `parent`.
async fn fetch_in(
    parent: &Path,
    git: &str,
    source: &str,
    auth: Option<&GitAuth>,
    timeout: Duration,
    max_bytes: u64,
    names: &LimitNames,
) -> Result<Checkout> {
    // The credential sent with the clone, if any: what git's words must not quote.
    let auth = auth.filter(|a| a.covers(source.trim()));
    let sent = auth.map(GitAuth::credentials);
    // A failure that may pass by itself (a host away, a timeout), and one that lasts until a
    // person changes the source or its credential.
    let unavailable = |reason: String| MemoryError::RepoUnavailable {
        source_repo: redact_url(source),
        reason: scrub(&reason, source, sent.as_ref()),
        lasting: false,
    };
    let lasting = |reason: String| MemoryError::RepoUnavailable {
        source_repo: redact_url(source),
        reason: scrub(&reason, source, sent.as_ref()),
        lasting: true,
    };
    let trimmed = source.trim();
    if trimmed.is_empty() {
        return Err(MemoryError::InvalidInput(
            "a repository URL or path is required".into(),
        ));
    }
    if !is_remote(trimmed) {
        let path = Path::new(trimmed);
        return match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(Checkout {
                root: path.to_path_buf(),
                _temp: None,
            }),
            Ok(_) => Err(lasting("it is a file, not a directory".into())),
            Err(e) => Err(lasting(format!(
                "no such local directory ({e}); a remote repository needs a URL"
            ))),
        };
    }
    if trimmed.starts_with('-') {
        return Err(MemoryError::InvalidInput(
            "a repository URL must not start with `-`".into(),
        ));
    }
    let temp = tempfile::Builder::new()
        .prefix("bridle-memory-clone-")
        .tempdir_in(parent)
        .map_err(|e| unavailable(format!("cannot create a temporary directory: {e}")))?;
    let dest = temp.path().join("repo");
    let mut cmd = tokio::process::Command::new(git);
    cmd.arg("-c")
        .arg("credential.helper=")
        .arg("clone")
        .arg("--depth")
        .arg("1")
        .arg("--quiet")
        .arg("--")
        .arg(trimmed)
        .arg(&dest)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("SSH_ASKPASS", "true")
        .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        .env_remove("GIT_CONFIG_PARAMETERS")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        // git's own words, untranslated: they tell a lasting failure from a passing one.
        .env("LC_ALL", "C")
        .kill_on_drop(true);
    match auth {
        Some(a) => {
            // Settings from the environment (git 2.31 and later), not `-c` on the command line
            // where any user of the machine could read them.
            cmd.env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", format!("http.{}.extraHeader", a.site()))
                .env("GIT_CONFIG_VALUE_0", a.header.as_str());
        }
        None => {
            cmd.env_remove("GIT_CONFIG_COUNT");
        }
    }
    tracing::info!(source = %redact_url(trimmed), authorized = auth.is_some(), "cloning example repository");
    let mut child = cmd.spawn().map_err(|e| {
        let reason = format!("cannot run git: {e}");
        if e.kind() == std::io::ErrorKind::NotFound {
            lasting(reason)
        } else {
            unavailable(reason)
        }
    })?;
    let stderr = child.stderr.take();
    let too_large = || MemoryError::too_large_clone(redact_url(source), max_bytes, names);
    let watched = temp.path().to_path_buf();
    // Dropped at the timeout with the child, which is then killed.
    let run = async move {
        {
            let waited = async { tokio::join!(child.wait(), stderr_tail(stderr)) };
            tokio::pin!(waited);
            let mut measure = tokio::time::interval(CLONE_MEASURE_EVERY);
            measure.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    done = &mut waited => return Some(done),
                    _ = measure.tick() => {
                        if disk_use(watched.clone()).await > max_bytes {
                            break;
                        }
                    }
                }
            }
        }
        // Over the limit: git is killed (by its pid) and waited for before its folder goes.
        let _ = child.kill().await;
        None
    };
    let (status, tail) = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| {
            unavailable(format!(
                "git clone did not finish within {} s",
                timeout.as_secs()
            ))
        })?
        .ok_or_else(too_large)?;
    let status = status.map_err(|e| unavailable(format!("git failed: {e}")))?;
    if !status.success() {
        let err = String::from_utf8_lossy(&tail);
        let msg = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("git clone failed")
            .trim();
        // Scrubbed and escaped before it is cut, so neither a credential nor an escape is
        // left half shown at the cut.
        let quoted = kberg_core::quoted(&scrub(msg, source, sent.as_ref()), MAX_QUOTED_GIT_CHARS);
        let hint = if msg.contains("could not read Username")
            || msg.contains("Authentication failed")
            || msg.contains("terminal prompts disabled")
        {
            " (the repository is private or needs credentials)"
        } else {
            ""
        };
        let reason = format!("{quoted}{hint}");
        return Err(if lasting_clone_failure(&err) {
            lasting(reason)
        } else {
            unavailable(reason)
        });
    }
    // A clone that finished between two measures.
    if disk_use(temp.path().to_path_buf()).await > max_bytes {
        return Err(too_large());
    }
    Ok(Checkout {
        root: dest,
        _temp: Some(temp),
    })
}

/// Whether what git said about a failed clone names a failure that lasts until a person acts:
/// the repository does not exist or is not one, or the host refuses the credential sent or
/// wants one none was sent for (answers 401, 403, 404 or 410, an ssh key refused). Anything
/// else (a refused connection, a name not resolved, a 5xx answer, a connection cut) may pass.
fn lasting_clone_failure(stderr: &str) -> bool {
    const LASTING: &[&str] = &[
        "could not read username",
        "could not read password",
        "authentication failed",
        "terminal prompts disabled",
        "does not appear to be a git repository",
        "repository not found",
        "' not found",
        "the requested url returned error: 401",
        "the requested url returned error: 403",
        "the requested url returned error: 404",
        "the requested url returned error: 410",
        "permission denied (publickey",
        "host key verification failed",
    ];
    let said = stderr.to_ascii_lowercase();
    LASTING.iter().any(|l| said.contains(l))
}

/// How often a running clone's folder is measured against its size limit.
const CLONE_MEASURE_EVERY: Duration = Duration::from_millis(200);

/// What a file or folder takes on disk at least, as a file system stores it: one block.
const DISK_BLOCK: u64 = 4096;

/// The bytes under `dir` on disk: each file's length and each folder, every one of them
/// counted as one [`DISK_BLOCK`] at least (links not followed; what cannot be read counts as
/// nothing, as a file git removes while it is measured), measured off the async workers. So
/// a checkout of countless empty files or folders, which a few KiB of history can hold, is
/// bounded as one of large files is.
async fn disk_use(dir: PathBuf) -> u64 {
    tokio::task::spawn_blocking(move || {
        let mut total: u64 = 0;
        let mut pending = vec![dir];
        while let Some(d) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let len = match entry.file_type() {
                    Ok(t) if t.is_dir() => {
                        pending.push(entry.path());
                        0
                    }
                    Ok(_) => entry.metadata().map_or(0, |m| m.len()),
                    Err(_) => continue,
                };
                total = total.saturating_add(len.max(DISK_BLOCK));
            }
        }
        total
    })
    .await
    .unwrap_or(0)
}

/// How much of what git writes to standard error is kept: its end, where the reason a clone
/// failed is.
const GIT_STDERR_TAIL: usize = 64 * 1024;

/// The last [`GIT_STDERR_TAIL`] bytes git writes to standard error, read until it closes it.
/// A remote's messages reach git's standard error (`remote: ...`, whatever `--quiet` asked of
/// it), so what git writes there is as long as the remote likes: it is read as it comes and
/// only its end is kept.
async fn stderr_tail(stderr: Option<tokio::process::ChildStderr>) -> Vec<u8> {
    use tokio::io::AsyncReadExt as _;
    let mut tail = Vec::new();
    let Some(mut stderr) = stderr else {
        return tail;
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > GIT_STDERR_TAIL {
                    let cut = tail.len() - GIT_STDERR_TAIL;
                    tail.drain(..cut);
                }
            }
        }
    }
    tail
}

/// A file chosen for indexing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Its path relative to the repository root, with `/` separators.
    pub path: String,
    /// Its contents.
    pub text: String,
}

/// Limits of [`source_files`] and [`collect_files`].
#[derive(Debug, Clone)]
pub struct FileRules {
    /// Files larger than this are skipped. Default 256 KiB.
    pub max_file_bytes: u64,
    /// At most this many indexable files are read; the walk stops at the next one, so the
    /// rest of a larger tree is never listed, and [`SourceFiles::over_file_limit`] says so;
    /// indexing then fails with [`MemoryError::IndexTooLarge`] rather than index part of a
    /// repository. Default 20,000.
    pub max_files: usize,
    /// At most this many bytes are read in all, every file read counting (indexable or not):
    /// what bounds the work and, when indexing, the memory, whatever the tree holds (20,000
    /// files of 256 KiB each are 5 GiB). The walk stops past it and
    /// [`SourceFiles::over_byte_limit`] says so; indexing then fails with
    /// [`MemoryError::IndexTooLarge`] rather than index part of a repository. Default 64 MiB.
    pub max_total_bytes: u64,
    /// Whether hidden files and folders (names starting with `.`) are read too. Default off.
    pub hidden: bool,
}

impl Default for FileRules {
    fn default() -> Self {
        Self {
            max_file_bytes: 256 * 1024,
            max_files: 20_000,
            max_total_bytes: 64 * 1024 * 1024,
            hidden: false,
        }
    }
}

/// Folders never descended into.
const SKIP_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "vendor",
    "third_party",
    "third-party",
    "target",
    "dist",
    "build",
    "out",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    ".next",
    ".nuxt",
    ".cache",
    "coverage",
    "bower_components",
    "Pods",
    ".idea",
    ".vscode",
    ".gradle",
    "site-packages",
    ".terraform",
];

/// Extensions of text files worth indexing.
const TEXT_EXTS: &[&str] = &[
    "rs", "py", "pyi", "js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts", "go", "java", "kt",
    "kts", "scala", "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "cs", "rb", "php", "swift", "m",
    "sh", "bash", "zsh", "lua", "ex", "exs", "erl", "hs", "ml", "clj", "dart", "vue", "svelte",
    "sql", "proto", "graphql", "md", "rst", "txt", "toml", "yaml", "yml", "ini", "cfg",
];

/// File names indexed whatever their extension.
const TEXT_NAMES: &[&str] = &["Dockerfile", "Makefile", "Justfile", "Rakefile", "Gemfile"];

/// File names never indexed (lock files and the like).
const SKIP_NAMES: &[&str] = &[
    "Cargo.lock",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "go.sum",
    "poetry.lock",
    "Pipfile.lock",
    "composer.lock",
    "Gemfile.lock",
    "uv.lock",
];

fn wanted_name(name: &str) -> bool {
    if SKIP_NAMES.contains(&name) {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    if lower.contains(".min.")
        || lower.ends_with(".map")
        || lower.ends_with(".pb.go")
        || lower.ends_with("_pb2.py")
        || lower.ends_with(".g.dart")
        || lower.contains("_generated.")
        || lower.contains(".generated.")
    {
        return false;
    }
    if TEXT_NAMES.contains(&name) {
        return true;
    }
    name.rsplit_once('.')
        .is_some_and(|(_, ext)| TEXT_EXTS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// Whether the first lines carry a generated-code marker.
fn looks_generated(text: &str) -> bool {
    text.lines().take(5).any(|l| {
        l.contains("@generated")
            || (l.contains("Code generated") && l.contains("DO NOT EDIT"))
            || l.contains("<auto-generated")
            || l.contains("This file is automatically generated")
    })
}

/// Walks `root` and returns the indexable files, sorted by path: [`source_files`], collected.
/// Every file's text is in memory at once; to index a large tree, iterate [`source_files`]
/// instead, which holds one file at a time. A tree over [`FileRules::max_total_bytes`] or
/// [`FileRules::max_files`] fails with [`MemoryError::IndexTooLarge`].
pub fn collect_files(root: &Path, rules: &FileRules) -> Result<Vec<SourceFile>> {
    let mut files = source_files(root, rules)?;
    let collected: Vec<SourceFile> = files.by_ref().collect();
    if let Some(file) = files.unsafe_ignore_file() {
        return Err(MemoryError::unsafe_ignore_file(
            root.display().to_string(),
            &file,
        ));
    }
    if files.over_byte_limit() {
        return Err(MemoryError::too_many_bytes(
            root.display().to_string(),
            rules.max_total_bytes,
            &LimitNames::default(),
        ));
    }
    if files.over_file_limit() {
        return Err(MemoryError::too_many_files(
            root.display().to_string(),
            rules.max_files,
            &LimitNames::default(),
        ));
    }
    Ok(collected)
}

/// Walks `root` and yields its indexable files in path order, each found and read only when
/// the iterator reaches it, so a walk holds one file's text at a time whatever the tree's size,
/// and a tree larger than the limits is never listed in full.
///
/// The walk is the `ignore` crate's (ripgrep's): `.gitignore` files (also outside a git
/// checkout, so a copied tree keeps its rules), `.git/info/exclude`, the user's global git
/// excludes and `.ignore` files are honoured (those of the folders above `root` too, up to the
/// root of the repository `root` is in and none above it; none above `root` when it is a
/// repository's root, holding `.git`, as a clone's is), hidden files and folders
/// are skipped unless [`FileRules::hidden`] says otherwise, and symlinks are not followed (they
/// may leave the repository or loop). An ignore file (`.gitignore`, `.ignore`) is read only when it is a file
/// of the tree of at most [`MAX_IGNORE_FILE_BYTES`], or a link to one: one that is a link leading
/// out of the tree or to something else (a device such as `/dev/zero`, which never ends), or a
/// larger file, stops the walk before it is read ([`SourceFiles::unsafe_ignore_file`] then names
/// it, and indexing fails with a lasting [`MemoryError::RepoUnavailable`]: the tree read
/// without its ignore rules would index what they hide). The folder, name, size, binary and
/// generated-file rules above apply on top. The walk stops at the first indexable file past
/// [`FileRules::max_files`] (not yielded; [`SourceFiles::over_file_limit`] then says so), or
/// once more than
/// [`FileRules::max_total_bytes`] have been read ([`SourceFiles::over_byte_limit`] then says
/// so). A file that cannot be read when its turn comes (removed or changed since its folder
/// was listed) is skipped.
pub fn source_files(root: &Path, rules: &FileRules) -> Result<SourceFiles> {
    let unreadable = || MemoryError::RepoUnavailable {
        source_repo: root.display().to_string(),
        reason: "it is not a readable directory".into(),
        lasting: true,
    };
    if !root.is_dir() {
        return Err(unreadable());
    }
    // Where the tree really is, for telling a link that stays in it from one that leaves it.
    let real_root = std::fs::canonicalize(root).map_err(|_| unreadable())?;
    // The root's ignore files are read at the walk's first step, which a bad one prevents; a
    // folder's as the walk enters it, which `filter_entry` refuses for a bad one.
    // A repository's root (a clone's always) takes no ignore rule from the folders above it,
    // as git takes none: for a clone those are the temporary folder's (`/tmp`, where any user
    // of the machine may leave a `.gitignore` that decides what is indexed, or a `.ignore`
    // linked to `/dev/zero` that the walk would read forever). A folder inside a repository
    // takes the rules of the folders above it up to the repository's root and none beyond
    // ([`RulesAbove`]); only a folder in no repository has the walk read every folder above.
    let repository_root = std::fs::symlink_metadata(root.join(".git")).is_ok();
    let above = if repository_root {
        RulesAbove::default()
    } else {
        RulesAbove::read(&real_root)
    };
    let unsafe_ignore = Arc::new(Mutex::new(
        above
            .unsafe_file
            .clone()
            .or_else(|| unsafe_ignore_file_in(root, &real_root)),
    ));
    let seen = Arc::clone(&unsafe_ignore);
    let read_parents = !repository_root && above.repository.is_none();
    let walk_root = root.to_path_buf();
    let walk = ignore::WalkBuilder::new(root)
        .hidden(!rules.hidden)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .ignore(true)
        .parents(read_parents)
        .require_git(false)
        .follow_links(false)
        .max_filesize(Some(rules.max_file_bytes))
        // Siblings in the order of their paths as strings (a folder `a` sorts as `a/`, after
        // `a-z.rs`), so that the walk, which never lists more than it yields, still yields the
        // whole tree in path order.
        .sort_by_file_path(sibling_order)
        .filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            if e.depth() == 0 {
                return true;
            }
            if above.ignores(&walk_root, &real_root, e.path(), is_dir) {
                return false;
            }
            if !is_dir {
                return true;
            }
            if SKIP_DIRS.contains(&e.file_name().to_string_lossy().as_ref()) {
                return false;
            }
            match unsafe_ignore_file_in(e.path(), &real_root) {
                Some(file) => {
                    // Not entered, so its ignore files are not read; the walk stops there.
                    *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
                    false
                }
                None => true,
            }
        })
        .build();
    Ok(SourceFiles {
        walk,
        rules: rules.clone(),
        left: rules.max_files,
        over_files: false,
        bytes_read: 0,
        walked: 0,
        root: root.to_path_buf(),
        unsafe_ignore,
    })
}

/// The ignore rules a folder inside a repository (not its root) takes from the folders above
/// it, up to the repository's root (the nearest folder above holding `.git`) and none beyond:
/// their `.gitignore` and `.ignore` files and the repository's `.git/info/exclude`. The walk
/// is told to read no folder above its root (the `ignore` crate's `parents` reads every one
/// up to `/`, `/tmp`'s too), and these rules are applied to its entries instead, the nearest
/// folder's first, as the walk applies its own. One difference: a `!pattern` in an ignore
/// file inside the walk does not bring back what a folder above ignores.
#[derive(Default)]
struct RulesAbove {
    /// The repository's root, when the folder is inside one.
    repository: Option<PathBuf>,
    /// Each folder's rules, the nearest folder's first, then the repository's exclude file.
    rules: Vec<ignore::gitignore::Gitignore>,
    /// An ignore file above that must not be read (see [`unsafe_ignore_file_in`]).
    unsafe_file: Option<PathBuf>,
}

impl RulesAbove {
    /// The rules above `real_root` (a canonical path) up to its repository's root; none when
    /// it is in no repository.
    fn read(real_root: &Path) -> Self {
        let Some(repository) = real_root
            .ancestors()
            .skip(1)
            .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
            .map(Path::to_path_buf)
        else {
            return Self::default();
        };
        let mut rules = Vec::new();
        for dir in real_root.ancestors().skip(1) {
            if let Some(file) = unsafe_ignore_file_in(dir, &repository) {
                return Self {
                    repository: Some(repository),
                    rules: Vec::new(),
                    unsafe_file: Some(file),
                };
            }
            // `.ignore` after `.gitignore`, so its rules win, as in the walk.
            rules.push(Self::matcher(dir, &[".gitignore", ".ignore"]));
            if dir == repository {
                break;
            }
        }
        if std::fs::symlink_metadata(repository.join(".git")).is_ok_and(|m| m.is_dir()) {
            rules.push(Self::matcher(&repository, &[".git/info/exclude"]));
        }
        Self {
            repository: Some(repository),
            rules,
            unsafe_file: None,
        }
    }

    /// The rules of the files `names` of `dir`, rooted at `dir`; a file that is missing or
    /// does not parse adds nothing, as in the walk.
    fn matcher(dir: &Path, names: &[&str]) -> ignore::gitignore::Gitignore {
        let mut b = ignore::gitignore::GitignoreBuilder::new(dir);
        for name in names {
            let file = dir.join(name);
            if file.is_file() {
                let _ = b.add(file);
            }
        }
        b.build()
            .unwrap_or_else(|_| ignore::gitignore::Gitignore::empty())
    }

    /// Whether the rules above ignore `path`, an entry of the walk of `root` (whose canonical
    /// path is `real_root`): the nearest folder's rule that matches decides.
    fn ignores(&self, root: &Path, real_root: &Path, path: &Path, is_dir: bool) -> bool {
        if self.rules.is_empty() {
            return false;
        }
        let path = real_root.join(path.strip_prefix(root).unwrap_or(path));
        for rules in &self.rules {
            match rules.matched(&path, is_dir) {
                ignore::Match::Ignore(_) => return true,
                ignore::Match::Whitelist(_) => return false,
                ignore::Match::None => {}
            }
        }
        false
    }
}

/// The most bytes an ignore file (`.gitignore`, `.ignore`) of a tree may hold to be read: 1 MiB,
/// far more than any written by hand, and little to hold as patterns.
pub const MAX_IGNORE_FILE_BYTES: u64 = 1 << 20;

/// The ignore file of `dir` that must not be read, if any: a link leading out of `real_root`
/// (the tree's canonical path) or to something that is not a file (or a folder, which reads as
/// nothing), or a file larger than [`MAX_IGNORE_FILE_BYTES`]. A link to nothing (dangling or
/// looping) is not read by the walk either, and is left alone.
fn unsafe_ignore_file_in(dir: &Path, real_root: &Path) -> Option<PathBuf> {
    let fits =
        |m: &std::fs::Metadata| m.is_dir() || (m.is_file() && m.len() <= MAX_IGNORE_FILE_BYTES);
    [".gitignore", ".ignore"]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|path| {
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                return false;
            };
            if !meta.file_type().is_symlink() {
                return !fits(&meta);
            }
            match std::fs::canonicalize(path) {
                Ok(target) => {
                    !target.starts_with(real_root)
                        || !std::fs::metadata(&target).is_ok_and(|m| fits(&m))
                }
                Err(_) => false,
            }
        })
}

/// How two walk entries of one folder sort: by name, a folder's as if followed by `/`. That
/// suffix only decides when one name is a prefix of the other, so only then is either entry
/// looked up on disk (one `stat` per comparison would be a system call per step of every
/// folder's sort).
fn sibling_order(a: &Path, b: &Path) -> std::cmp::Ordering {
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.as_encoded_bytes().to_vec())
            .unwrap_or_default()
    };
    let (x, y) = (name(a), name(b));
    let common = x.len().min(y.len());
    if x[..common] != y[..common] || x.len() == y.len() {
        return x.cmp(&y);
    }
    path_key(a).cmp(&path_key(b))
}

/// How a walk entry sorts among its siblings: its name, with a `/` after a folder's (not
/// following symlinks, as the walk does not).
fn path_key(path: &Path) -> Vec<u8> {
    let mut key = path
        .file_name()
        .map(|n| n.as_encoded_bytes().to_vec())
        .unwrap_or_default();
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        key.push(b'/');
    }
    key
}

/// The indexable files of a tree, found and read one at a time (see [`source_files`]).
pub struct SourceFiles {
    walk: ignore::Walk,
    rules: FileRules,
    /// How many more files may be yielded.
    left: usize,
    /// Whether an indexable file was found past the file limit (the walk then ends).
    over_files: bool,
    /// Bytes read so far, of every file read.
    bytes_read: u64,
    /// Entries the walk has produced so far (files and folders), to show it stops early.
    walked: usize,
    root: PathBuf,
    /// An ignore file found that must not be read (see [`source_files`]); the walk stops.
    unsafe_ignore: Arc<Mutex<Option<PathBuf>>>,
}

impl std::fmt::Debug for SourceFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceFiles")
            .field("root", &self.root)
            .field("left", &self.left)
            .field("bytes_read", &self.bytes_read)
            .finish_non_exhaustive()
    }
}

impl SourceFiles {
    /// Bytes read so far, of every file read (indexable or not).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Whether the walk stopped because more than [`FileRules::max_total_bytes`] were read:
    /// what it yielded is then only part of the tree.
    pub fn over_byte_limit(&self) -> bool {
        self.bytes_read > self.rules.max_total_bytes
    }

    /// Whether the walk stopped because the tree has more than [`FileRules::max_files`]
    /// indexable files: what it yielded is then only part of the tree.
    pub fn over_file_limit(&self) -> bool {
        self.over_files
    }

    /// The ignore file (its path in the tree, with `/` separators) that stopped the walk
    /// unread, being a link leading out of the tree or to something other than a file, or
    /// larger than [`MAX_IGNORE_FILE_BYTES`] (see [`source_files`]): what the walk yielded is
    /// then only part of the tree, read without its ignore rules.
    pub fn unsafe_ignore_file(&self) -> Option<String> {
        let found = self
            .unsafe_ignore
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        Some(relative(&self.root, &found))
    }
}

impl Iterator for SourceFiles {
    type Item = SourceFile;

    fn next(&mut self) -> Option<SourceFile> {
        while !self.over_files && !self.over_byte_limit() {
            if self
                .unsafe_ignore
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
            {
                return None;
            }
            let entry = match self.walk.next()? {
                Ok(e) => e,
                Err(e) => {
                    // An unreadable folder or a malformed ignore file: skip it, say so.
                    tracing::debug!(error = ?e.to_string(), "skipped while walking the repository");
                    continue;
                }
            };
            self.walked += 1;
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if !wanted_name(&name) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.len() > self.rules.max_file_bytes || meta.len() == 0 {
                continue;
            }
            let path = entry.into_path();
            let Some(text) = indexable_text(&path, self.rules.max_file_bytes, &mut self.bytes_read)
            else {
                continue;
            };
            if self.over_byte_limit() {
                tracing::warn!(root = %self.root.display(), limit = self.rules.max_total_bytes, "byte limit reached; the walk stops");
                return None;
            }
            if self.left == 0 {
                // One indexable file more than may be read: the tree is over the limit.
                tracing::warn!(root = %self.root.display(), limit = self.rules.max_files, "file limit passed; the walk stops");
                self.over_files = true;
                return None;
            }
            self.left -= 1;
            let rel = relative(&self.root, &path);
            return Some(SourceFile { path: rel, text });
        }
        None
    }
}

/// `path` relative to `root`, with `/` separators.
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// A candidate's text, when it is indexable: not over the size limit (it may have grown since
/// the walk), not binary (a NUL byte near the start, or not UTF-8), not generated, not blank.
/// Every byte read is added to `bytes_read`.
fn indexable_text(path: &Path, max_file_bytes: u64, bytes_read: &mut u64) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    // One byte over the limit tells a file that grew past it.
    let read = file
        .take(max_file_bytes.saturating_add(1))
        .read_to_end(&mut bytes);
    *bytes_read = bytes_read.saturating_add(bytes.len() as u64);
    read.ok()?;
    if bytes.len() as u64 > max_file_bytes || bytes.iter().take(8000).any(|b| *b == 0) {
        return None;
    }
    let text = String::from_utf8(bytes).ok()?;
    (!looks_generated(&text) && !text.trim().is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_clone_names_the_source_without_its_token() {
        // Nothing listens on port 9 of the loopback: the clone fails at once.
        let source = "http://bot:s3cret-token@127.0.0.1:9/team/x.git";
        let err = fetch(source, Duration::from_secs(30))
            .await
            .map(|_| ())
            .expect_err("nothing to clone");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("s3cret-token"), "{shown}");
        assert!(shown.contains("127.0.0.1:9"), "{shown}");
    }

    #[tokio::test]
    async fn a_token_with_an_unencoded_slash_is_hidden_whole() {
        // The token's `/` is not escaped: the user part ends at the `@`, not at the `/`.
        let source = "http://bot:s3cret/token-tail@127.0.0.1:9/team/x.git";
        assert_eq!(redact_url(source), "http://***@127.0.0.1:9/team/x.git");
        let err = fetch(source, Duration::from_secs(30))
            .await
            .map(|_| ())
            .expect_err("nothing to clone");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("token-tail"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    /// A bare repository under `dir` holding one commit of `bytes` bytes that do not compress,
    /// as a `file://` URL.
    fn bare_repository(dir: &Path, bytes: usize) -> String {
        use kberg_testkit::git::git;
        let work = dir.join("work");
        std::fs::create_dir_all(&work).expect("mkdir");
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let data: Vec<u8> = (0..bytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect();
        std::fs::write(work.join("data.bin"), data).expect("write");
        git(&work, &["init", "-q"]);
        git(&work, &["add", "data.bin"]);
        git(&work, &["commit", "-q", "-m", "data"]);
        let bare = dir.join("bare.git");
        git(
            dir,
            &["clone", "-q", "--bare", "work", &bare.display().to_string()],
        );
        format!("file://{}", bare.display())
    }

    #[tokio::test]
    async fn a_clone_over_its_size_limit_is_stopped_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = bare_repository(dir.path(), 2 << 20);
        let clones = dir.path().join("clones");
        std::fs::create_dir(&clones).expect("mkdir");
        let err = fetch_in(
            &clones,
            "git",
            &source,
            None,
            Duration::from_secs(120),
            256 << 10,
            &LimitNames::default(),
        )
        .await
        .map(|_| ())
        .expect_err("a clone of 2 MiB that does not compress is over 256 KiB");
        assert_eq!(err.code(), "index_too_large", "{err}");
        let shown = err.to_string();
        assert!(shown.contains("max_clone_bytes"), "{shown}");
        assert!(shown.contains("262144"), "{shown}");
        let left: Vec<_> = std::fs::read_dir(&clones).expect("read").collect();
        assert!(left.is_empty(), "the partial clone is removed: {left:?}");
        // Under a limit it fits, the same repository is cloned.
        let checkout = fetch_in(
            &clones,
            "git",
            &source,
            None,
            Duration::from_secs(120),
            64 << 20,
            &LimitNames::default(),
        )
        .await
        .expect("fits");
        assert!(checkout.root().join("data.bin").is_file());
    }

    /// A file system stores each file and folder in at least one block, and git checks out
    /// any number of empty files and the folders holding them from a few KiB of history: each
    /// counts as a 4 KiB block at least, so such a checkout is bounded by the same limit.
    #[tokio::test]
    async fn a_clone_of_many_empty_files_and_folders_counts_their_blocks() {
        use kberg_testkit::git::git;
        let dir = tempfile::tempdir().expect("tempdir");
        let work = dir.path().join("work");
        for n in 0..400 {
            let folder = work.join(format!("d{n:03}"));
            std::fs::create_dir_all(&folder).expect("mkdir");
            std::fs::write(folder.join("e"), "").expect("write");
        }
        git(&work, &["init", "-q"]);
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "empty"]);
        let source = format!("file://{}", work.display());
        let clones = dir.path().join("clones");
        std::fs::create_dir(&clones).expect("mkdir");
        // 800 files and folders are at least 3.2 MiB on disk, whatever their lengths say.
        let err = fetch_in(
            &clones,
            "git",
            &source,
            None,
            Duration::from_secs(120),
            1 << 20,
            &LimitNames::default(),
        )
        .await
        .map(|_| ())
        .expect_err("800 entries are more than 1 MiB on disk");
        assert_eq!(err.code(), "index_too_large", "{err}");
        let left: Vec<_> = std::fs::read_dir(&clones).expect("read").collect();
        assert!(left.is_empty(), "the partial clone is removed: {left:?}");
        fetch_in(
            &clones,
            "git",
            &source,
            None,
            Duration::from_secs(120),
            64 << 20,
            &LimitNames::default(),
        )
        .await
        .expect("fits in 64 MiB");
    }

    #[tokio::test]
    async fn a_clone_still_running_past_its_size_limit_is_killed() {
        // A stand-in git that writes 1 MiB into the clone's folder and then never ends: only
        // the size limit ends it (the timeout would fail with `repo_unavailable`).
        let dir = tempfile::tempdir().expect("tempdir");
        let git = dir.path().join("git");
        std::fs::write(
            &git,
            "#!/bin/sh\nfor a; do dest=$a; done\nmkdir -p \"$dest\"\nhead -c 1048576 /dev/zero > \"$dest/big\"\nexec tail -f /dev/null\n",
        )
        .expect("write the stand-in");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let clones = dir.path().join("clones");
        std::fs::create_dir(&clones).expect("mkdir");
        let err = fetch_in(
            &clones,
            &git.display().to_string(),
            "https://git.example.invalid/team/huge.git",
            None,
            Duration::from_secs(600),
            64 << 10,
            &LimitNames::default(),
        )
        .await
        .map(|_| ())
        .expect_err("over the limit");
        assert_eq!(err.code(), "index_too_large", "{err}");
        let left: Vec<_> = std::fs::read_dir(&clones).expect("read").collect();
        assert!(left.is_empty(), "the partial clone is removed: {left:?}");
    }

    /// A stand-in git at `dir/git` running `script` (`sh`), executable.
    fn stand_in_git(dir: &Path, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let git = dir.join("git");
        std::fs::write(&git, format!("#!/bin/sh\n{script}")).expect("write the stand-in");
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        git
    }

    /// A host (or a proxy before it) that quotes the credential it was sent in the error git
    /// prints last (`fatal: remote error: ...`, from the host's own words): before, the secret
    /// of the site's [`GitAuth`] reached the error a tool answers and a log line.
    #[tokio::test]
    async fn a_host_quoting_the_credential_sent_is_not_quoted() {
        const SECRET: &str = "canary-clone-secret-9Qx2";
        let dir = tempfile::tempdir().expect("tempdir");
        // The header as git was given it, its Basic value, and that value decoded.
        let git = stand_in_git(
            dir.path(),
            "h=\"$GIT_CONFIG_VALUE_0\"\nb=${h#Authorization: Basic }\n\
             d=$(printf %s \"$b\" | base64 -d)\n\
             echo \"fatal: remote error: refused [$h] basic [$b] pair [$d] secret [${d#*:}]\" >&2\n\
             exit 128\n",
        );
        let clones = dir.path().join("clones");
        std::fs::create_dir(&clones).expect("mkdir");
        let auth = GitAuth::basic("https://git.example.invalid/", "bridle-bot", SECRET)
            .expect("a valid credential");
        let err = fetch_in(
            &clones,
            &git.display().to_string(),
            "https://git.example.invalid/team/app.git",
            Some(&auth),
            Duration::from_secs(60),
            1 << 20,
            &LimitNames::default(),
        )
        .await
        .map(|_| ())
        .expect_err("the host refused");
        assert_eq!(err.code(), "repo_unavailable", "{err}");
        let shown = format!("{err} {err:?}");
        assert!(
            shown.contains("remote error: refused [[redacted]]"),
            "{shown}"
        );
        assert!(!shown.contains(SECRET), "{shown}");
        use base64::Engine as _;
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("bridle-bot:{SECRET}"));
        assert!(!shown.contains(&basic), "{shown}");
        assert!(!shown.contains("Basic"), "{shown}");
    }

    /// A host's last words, which a failed clone's error quotes, hold control characters: an
    /// ESC sequence, a carriage return, bidirectional overrides and isolates, a NUL. Before,
    /// they reached the error as they were, so a terminal or a panel showing it would colour,
    /// rewrite or reorder the text; each is written as its escape, other text as it is, and a
    /// line as long as the host likes is cut.
    #[tokio::test]
    async fn a_host_s_control_characters_are_escaped_in_the_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let git = stand_in_git(
            dir.path(),
            "printf 'fatal: remote error: \\033[2Jgood\\rbad \\342\\200\\256txt.exe\\342\\200\\254 \\342\\201\\246iso\\342\\201\\251 nul\\001 \\302\\205 caf\\303\\251\\n' >&2\n\
             exit 128\n",
        );
        let long_dir = dir.path().join("long");
        std::fs::create_dir(&long_dir).expect("mkdir");
        let long = stand_in_git(
            &long_dir,
            "printf 'fatal: ' >&2\nhead -c 10000 /dev/zero | tr '\\000' x >&2\nexit 128\n",
        );
        let clones = dir.path().join("clones");
        std::fs::create_dir(&clones).expect("mkdir");
        let fail = |git: PathBuf| {
            let clones = clones.clone();
            async move {
                fetch_in(
                    &clones,
                    &git.display().to_string(),
                    "https://git.example.invalid/team/app.git",
                    None,
                    Duration::from_secs(60),
                    1 << 20,
                    &LimitNames::default(),
                )
                .await
                .map(|_| ())
                .expect_err("the host refused")
            }
        };
        let err = fail(git).await;
        assert_eq!(err.code(), "repo_unavailable", "{err}");
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                !shown.chars().any(kberg_core::escaped_when_quoted),
                "{shown:?}"
            );
        }
        let shown = err.to_string();
        assert!(
            shown.contains(
                "fatal: remote error: \\u{1b}[2Jgood\\rbad \\u{202e}txt.exe\\u{202c} \
                 \\u{2066}iso\\u{2069} nul\\u{1} \\u{85} café"
            ),
            "{shown}"
        );
        let err = fail(long).await;
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("fatal: {}...", "x".repeat(493))),
            "{shown}"
        );
        assert!(!shown.contains(&"x".repeat(494)), "{shown}");
    }

    /// A clone is made under the temporary folder, where any user of the machine may leave
    /// ignore files: before, a `.gitignore` or `.ignore` of a folder above a repository's root
    /// decided which of its files were indexed. git reads none there, nor does the walk now;
    /// a folder inside a repository keeps the rules above it.
    #[test]
    fn ignore_files_above_a_repository_root_do_not_apply() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(".gitignore"), "*.rs\n").expect("write");
        std::fs::write(dir.path().join(".ignore"), "*.py\n").expect("write");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        std::fs::create_dir_all(repo.join("sub")).expect("mkdir");
        std::fs::write(repo.join(".gitignore"), "*.go\n").expect("write");
        for f in ["a.rs", "b.py", "c.go", "sub/e.go", "sub/f.ts"] {
            std::fs::write(repo.join(f), "x = 1\n").expect("write");
        }
        let paths = |root: &Path| -> Vec<String> {
            collect_files(root, &FileRules::default())
                .expect("walk")
                .into_iter()
                .map(|f| f.path)
                .collect()
        };
        // The repository's own rule applies, those above it do not.
        assert_eq!(paths(&repo), ["a.rs", "b.py", "sub/f.ts"]);
        // A folder of the repository is read under the repository's rules.
        assert_eq!(paths(&repo.join("sub")), ["f.ts"]);
    }

    /// A folder inside a repository, as a local source may be, takes the ignore rules of the
    /// folders above it up to the repository's root, and those of no folder above that: before,
    /// the walk read every folder's up to `/` (a `.ignore` in the temporary folder decided
    /// what was indexed, and one linked to `/dev/zero` would be read forever).
    #[test]
    fn a_folder_inside_a_repository_takes_the_rules_up_to_the_repository_root_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(".gitignore"), "*.rs\n").expect("write");
        std::fs::write(dir.path().join(".ignore"), "*.py\n").expect("write");
        let repo = dir.path().join("repo");
        let inner = repo.join("sub/inner");
        std::fs::create_dir_all(repo.join(".git/info")).expect("mkdir");
        std::fs::create_dir_all(inner.join("gen")).expect("mkdir");
        std::fs::write(repo.join(".git/info/exclude"), "*.java\n").expect("write");
        // Anchored at the repository's root; a later `!` brings a file back.
        std::fs::write(repo.join(".gitignore"), "*.go\n/sub/inner/gen/\n!keep.go\n")
            .expect("write");
        std::fs::write(repo.join("sub/.ignore"), "*.ts\n").expect("write");
        for f in [
            "a.rs", "b.py", "c.go", "keep.go", "d.ts", "e.java", "f.c", "gen/x.c",
        ] {
            std::fs::write(inner.join(f), "x = 1\n").expect("write");
        }
        let paths: Vec<String> = collect_files(&inner, &FileRules::default())
            .expect("walk")
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(paths, ["a.rs", "b.py", "f.c", "keep.go"]);
    }

    /// An ignore file above a folder inside a repository, up to the repository's root, is
    /// checked as the tree's own are: one linked to a device stops the walk unread.
    #[test]
    fn an_unsafe_ignore_file_above_a_folder_of_a_repository_stops_the_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        std::fs::create_dir_all(repo.join("sub")).expect("mkdir");
        std::os::unix::fs::symlink("/dev/zero", repo.join(".ignore")).expect("symlink");
        std::fs::write(repo.join("sub/a.rs"), "x = 1\n").expect("write");
        let mut files = source_files(&repo.join("sub"), &FileRules::default()).expect("walk");
        assert_eq!(files.by_ref().count(), 0);
        let file = files.unsafe_ignore_file().expect("named");
        assert!(file.ends_with("repo/.ignore"), "{file}");
    }

    #[test]
    fn files_are_read_one_at_a_time_in_path_order_and_a_change_after_the_walk_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        };
        write("b/lib.rs", "fn b() {}\n");
        write("a-z.rs", "fn az() {}\n");
        write("a/main.rs", "fn main() {}\n");
        write("c.rs", "fn c() {}\n");
        write("d.rs", "fn d() {}\n");
        write("e.rs", "fn e() {}\n");
        let rules = FileRules {
            max_file_bytes: 64,
            ..FileRules::default()
        };
        let all = collect_files(dir.path(), &rules).expect("walk");
        let paths: Vec<&str> = all.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["a-z.rs", "a/main.rs", "b/lib.rs", "c.rs", "d.rs", "e.rs"]
        );
        assert_eq!(all[1].text, "fn main() {}\n");

        // Nothing is read before the iterator reaches it: a file removed, grown past the
        // limit or made binary after the walk is skipped, one rewritten is read as it is now.
        let mut files = source_files(dir.path(), &rules).expect("walk");
        let first = files.next().expect("a first file");
        assert_eq!(first.path, "a-z.rs");
        std::fs::remove_file(dir.path().join("a/main.rs")).expect("remove");
        write("b/lib.rs", &"x".repeat(65));
        write("c.rs", "fn c() {}\0\n");
        write("d.rs", "fn rewritten() {}\n");
        let rest: Vec<SourceFile> = files.collect();
        let paths: Vec<&str> = rest.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["d.rs", "e.rs"]);
        assert_eq!(rest[0].text, "fn rewritten() {}\n");

        // The limit counts files yielded, in path order, and one more passes it.
        let two = FileRules {
            max_files: 2,
            ..rules.clone()
        };
        let mut walk = source_files(dir.path(), &two).expect("walk");
        let paths: Vec<String> = walk.by_ref().map(|f| f.path).collect();
        assert_eq!(paths, ["a-z.rs", "d.rs"]);
        assert!(walk.over_file_limit(), "e.rs is past the limit");
        let three = FileRules {
            max_files: 3,
            ..rules
        };
        let mut walk = source_files(dir.path(), &three).expect("walk");
        assert_eq!(walk.by_ref().count(), 3);
        assert!(!walk.over_file_limit(), "exactly at the limit is within it");
        assert!(source_files(&dir.path().join("missing"), &two).is_err());
    }

    /// The walk lists no more of a tree than it yields: a tree of 300 folders limited to three
    /// files opens three of them, and a byte limit stops it at the file that passes it.
    #[test]
    fn limits_as_large_as_they_go_read_every_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f.rs"), "fn f() {}\n").expect("write");
        let rules = FileRules {
            max_file_bytes: u64::MAX,
            max_total_bytes: u64::MAX,
            max_files: usize::MAX,
            ..FileRules::default()
        };
        let files = collect_files(dir.path(), &rules).expect("walk");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].text, "fn f() {}\n");
    }

    #[test]
    fn the_walk_stops_at_the_file_limit_and_at_the_byte_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in 0..300 {
            let p = dir.path().join(format!("d{n:03}"));
            std::fs::create_dir(&p).expect("mkdir");
            std::fs::write(p.join("f.rs"), "fn f() {}\n").expect("write");
        }
        let rules = FileRules {
            max_files: 3,
            ..FileRules::default()
        };
        let mut files = source_files(dir.path(), &rules).expect("walk");
        let paths: Vec<String> = files.by_ref().map(|f| f.path).collect();
        assert_eq!(paths, ["d000/f.rs", "d001/f.rs", "d002/f.rs"]);
        // The root, four folders and their four files (the fourth tells the tree is over the
        // limit): the other 296 folders were never walked into or listed past the root.
        assert!(files.walked <= 9, "walked {} entries", files.walked);
        assert!(!files.over_byte_limit());
        assert!(files.over_file_limit());
        assert_eq!(files.next().map(|f| f.path), None, "the walk stays ended");
        let err = collect_files(dir.path(), &rules).expect_err("over the file limit");
        assert_eq!(err.code(), "index_too_large", "{err}");
        assert!(err.to_string().contains("max_files"), "{err}");

        // Each file is 10 bytes: the third passes 25, and the walk stops before yielding it.
        let rules = FileRules {
            max_total_bytes: 25,
            ..FileRules::default()
        };
        let mut files = source_files(dir.path(), &rules).expect("walk");
        assert_eq!(files.by_ref().count(), 2);
        assert!(files.over_byte_limit());
        assert_eq!(files.bytes_read(), 30);
        assert!(files.walked <= 7, "walked {} entries", files.walked);
        let err = collect_files(dir.path(), &rules).expect_err("over the byte limit");
        assert_eq!(err.code(), "index_too_large", "{err}");
        assert!(err.to_string().contains("max_total_bytes"), "{err}");
    }

    #[test]
    fn only_https_ssh_and_scp_like_urls_are_network_sources() {
        for source in [
            "https://git.example/team/app.git",
            "https://bot:s3cret@git.example:8443/team/app.git",
            "https://[::1]/team/app.git",
            "ssh://git@git.example:2222/team/app.git",
            "git@git.example:team/app.git",
            "git@github.com:team/app",
        ] {
            assert!(is_network_source(source), "{source}");
        }
        for source in [
            "",
            ".",
            "..",
            "/var/lib/bridle",
            "./repo",
            "repo",
            "~/repo",
            "file:///var/lib/bridle",
            "file://localhost/var/lib/bridle",
            "FILE:///etc",
            "http://git.example/app.git",
            "git://git.example/app.git",
            "ext::sh -c touch% /tmp/x",
            "https://",
            "https:///var/lib/bridle",
            "https://@/x",
            "https://-oProxyCommand=x/y",
            "ssh://-oProxyCommand=touch%20x/y",
            "git@-oProxyCommand=x:y",
            "git@host/dir:path",
            "git@host:",
            "git@:path",
            "deploy@host:path",
            " https://git.example/app.git",
            "https://git.example/app.git\nfoo",
            "-https://git.example/app.git",
            "C:\\repos\\app",
        ] {
            assert!(!is_network_source(source), "{source:?}");
        }
    }

    #[test]
    fn names_and_markers() {
        assert!(wanted_name("lib.rs"));
        assert!(wanted_name("Dockerfile"));
        assert!(!wanted_name("Cargo.lock"));
        assert!(!wanted_name("app.min.js"));
        assert!(!wanted_name("logo.png"));
        assert!(!wanted_name("api.pb.go"));
        assert!(looks_generated(
            "// Code generated by protoc. DO NOT EDIT.\npackage x"
        ));
        assert!(looks_generated("// @generated\n"));
        assert!(!looks_generated("fn main() {}\n"));
        assert!(is_remote("https://example.invalid/r.git"));
        assert!(is_remote("git@example.invalid:o/r.git"));
        assert!(!is_remote("/tmp/repo"));
    }
}
