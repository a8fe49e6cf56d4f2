//! The remote tool surface: an MCP server reached through rmcp's client.
//!
//! [`McpSurface`] connects over Streamable HTTP or spawns a server as a child process on stdio,
//! lists its tools once per run and calls them. Connecting is bounded: a server that has not
//! answered `initialize` within [`McpOptions::connect_timeout`] (30 s by default) is given up
//! with [`SurfaceError::Connect`], and a spawned one is stopped. The listing is bounded: each `tools/list` page is
//! awaited at most 30 s, and a list that repeats a page cursor or has not ended after
//! [`MAX_TOOL_LIST_PAGES`] pages fails as malformed, so a server cannot hold a run or grow its
//! memory with a list that never ends. A Kberg server reports gate refusals as error
//! results whose structured content carries the stable `code` (see
//! [`kberg_core::GateError::details`]); those become the same [`ToolResult`] codes an in-process
//! [`crate::LocalSurface`] gives, so a run behaves the same wherever its tools live. Other
//! servers' error results become `tool_failed`, and JSON-RPC errors are mapped by meaning
//! (an unknown tool, invalid parameters). Cancelling a call sends `notifications/cancelled` to
//! the server and waits until the transport has sent it, so the server hears of it even when
//! the surface is dropped the moment the call returns (as when a cancelled run ends).
//!
//! Every call declares the MCP tasks extension (in the request's `_meta`), so a server may
//! answer a long-running tool with a task: the surface then waits for it, polling `tasks/get`
//! at the interval the server suggests (kept between 50 ms and 5 s), and answers with the
//! task's result, so the loop sees an ordinary tool result. Cancelling the call cancels the task
//! (`tasks/cancel`). A task that asks the client for input cannot be answered by an agent: it is
//! cancelled and the call answers `tool_failed` saying so. With a progress sink, the task's
//! creation and each poll that finds it working tell the sink the tool is alive
//! ([`ProgressSink::alive`]), which restarts the loop's idle timeout.
//!
//! rmcp gives every request a progress token of its own (in its `_meta`). For a call made with
//! [`ToolSurface::call_with_progress`], the server's `notifications/progress` for that token
//! (also while its task runs) go to the call's sink until the call returns, each as it is read
//! from the connection: in the order the server sent them, and all of those sent before the
//! answer before the call returns; other reports are dropped. (A report the server sends before the request has left this side's queue, which
//! would need the server to answer faster than the surface registers the call, is dropped too.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use kberg_core::{ErrorCode, PagesError, SpawnOnDrop, UrlCredentials, read_pages, redact_url};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CancelledNotification, CancelledNotificationParam, ClientCapabilities, ClientRequest,
    ContentBlock, GetTaskParams, JsonRpcMessage, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, RequestId, RequestMetaObject, ServerNotification, ServerResult, Task,
    TaskPayload,
};
use rmcp::service::{
    PeerRequestOptions, RoleClient, RunningService, RxJsonRpcMessage, ServiceError,
    TxJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, Transport};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, ServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::ToolDefinition;
use crate::progress::{ProgressReport, ProgressSink};
use crate::surface::{SurfaceError, ToolResult, ToolSurface, code_of};

/// A connected MCP server used as a tool surface.
pub struct McpSurface {
    client: Client,
    listed: RwLock<HashSet<String>>,
    /// What a [`SurfaceError`] must not quote: the credentials of a Streamable HTTP URL (its
    /// user part and query values) and the bearer token. The HTTP client's own errors name
    /// the URL it sent to, query and all.
    credentials: UrlCredentials,
    /// Requests carry a bearer token: a 401 then means the token was refused, not missing.
    bearer: bool,
}

/// `e` with every credential in `credentials` replaced by `[redacted]`.
fn scrub_surface_error(credentials: &UrlCredentials, e: SurfaceError) -> SurfaceError {
    if credentials.is_empty() {
        return e;
    }
    match e {
        SurfaceError::Connect(t) => SurfaceError::Connect(credentials.scrub(&t)),
        SurfaceError::Transport(t) => SurfaceError::Transport(credentials.scrub(&t)),
        SurfaceError::Malformed(t) => SurfaceError::Malformed(credentials.scrub(&t)),
    }
}

/// The running client: one this surface connected, which routes progress, or one the app
/// connected itself ([`McpSurface::from_client`]), which does not.
enum Client {
    Routed(RunningService<RoleClient, ProgressRoutes>),
    Plain(RunningService<RoleClient, ()>),
}

impl Client {
    fn peer(&self) -> &Peer<RoleClient> {
        match self {
            Client::Routed(c) => c.peer(),
            Client::Plain(c) => c.peer(),
        }
    }

    /// The progress routes, when this client has them.
    fn routes(&self) -> Option<&ProgressRoutes> {
        match self {
            Client::Routed(c) => Some(c.service()),
            Client::Plain(_) => None,
        }
    }

    async fn cancel(self) -> Result<(), tokio::task::JoinError> {
        match self {
            Client::Routed(c) => c.cancel().await.map(|_| ()),
            Client::Plain(c) => c.cancel().await.map(|_| ()),
        }
    }
}

/// The progress routes of a surface's calls: each `notifications/progress` goes to the sink of
/// the call whose token it names, if that call is still running (and is dropped otherwise). The
/// transport delivers them as it reads them ([`InOrder`]); as the client's handler this does
/// nothing of its own.
#[derive(Clone, Default)]
struct ProgressRoutes {
    sinks: Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>,
}

impl ProgressRoutes {
    /// Routes `token`'s reports to `sink` until the returned guard drops.
    fn route(&self, token: ProgressToken, sink: ProgressSink) -> RouteGuard {
        self.lock().insert(token.clone(), sink);
        RouteGuard {
            routes: self.clone(),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, ProgressSink>> {
        // The map is consistent after any panic (single inserts and removes).
        self.sinks.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Passes a report to the sink of the call whose token it names, if that call is still
    /// running (and drops it otherwise).
    fn deliver(&self, params: &ProgressNotificationParam) {
        // The sink is called outside the lock: it runs the app's code.
        let sink = self.lock().get(&params.progress_token).cloned();
        if let Some(sink) = sink {
            let mut report = ProgressReport::new(params.progress);
            report.total = params.total;
            report.message = params.message.clone();
            sink.report(report);
        }
    }
}

/// Progress is delivered by the transport as it is read ([`InOrder`]), not by a handler task.
impl ClientHandler for ProgressRoutes {}

/// The client's transport: each progress report goes to its call's sink as it is read, in the
/// order the server sent it and before the answer that follows it. rmcp hands each
/// notification to the client handler as a task of its own, so a report delivered there could
/// overtake the one before it (which then no longer advances, and is dropped) or come after the
/// call's answer, when its route is gone (and be lost): the last report of a tool that answers
/// right after it was lost that way. The sink runs on the task that reads the connection, so it
/// must not block, as a sink never may ([`ProgressSink`]); a sink that panics loses the report.
struct InOrder<T> {
    inner: T,
    routes: ProgressRoutes,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for InOrder<T> {
    type Error = T::Error;

    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(n) = &mut message
            && let ServerNotification::ProgressNotification(p) = &mut n.notification
        {
            // The sink is the app's code: one that panics loses this report, as it would on a
            // handler task of its own, not the connection this task reads.
            let routes = &self.routes;
            let params = &p.params;
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| routes.deliver(params)))
                .is_err()
            {
                tracing::warn!("a progress sink panicked; its report was dropped");
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Removes a call's progress route when the call ends, however it ends.
struct RouteGuard {
    routes: ProgressRoutes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let removed = self.routes.lock().remove(&self.token);
        // The sink runs the app's code when dropped: outside the lock.
        drop(removed);
    }
}

impl std::fmt::Debug for McpSurface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSurface").finish_non_exhaustive()
    }
}

/// How an [`McpSurface`] connects.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpOptions {
    /// How long the session's start (the MCP `initialize` exchange) may take (default 30 s).
    /// A server that has not answered by then is given up: the connection fails with
    /// [`SurfaceError::Connect`], and the transport is dropped, which stops a spawned server.
    /// Without it a server that never answers would hold the caller for ever.
    pub connect_timeout: Duration,
    /// The bearer token sent as `Authorization: Bearer <token>` over Streamable HTTP (default
    /// none; see [`McpSurface::connect_http_with_bearer`]). Other transports ignore it.
    pub bearer: Option<String>,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            bearer: None,
        }
    }
}

impl McpOptions {
    /// Sets how long the session's start may take (see [`McpOptions::connect_timeout`]).
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = limit;
        self
    }

    /// Sets the bearer token for Streamable HTTP.
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }
}

impl McpSurface {
    /// Connects to a Streamable HTTP endpoint (e.g. `http://127.0.0.1:8080/mcp`), with the
    /// default [`McpOptions`].
    pub async fn connect_http(url: &str) -> Result<Self, SurfaceError> {
        Self::connect_http_with(url, &McpOptions::default()).await
    }

    /// Connects to a Streamable HTTP endpoint that wants `Authorization: Bearer <token>` (the
    /// server maps the token to the principal whose grants the run gets).
    pub async fn connect_http_with_bearer(url: &str, token: &str) -> Result<Self, SurfaceError> {
        Self::connect_http_with(url, &McpOptions::default().bearer(token)).await
    }

    /// Connects to a Streamable HTTP endpoint with `options` (a bearer token, the connect
    /// timeout).
    pub async fn connect_http_with(url: &str, options: &McpOptions) -> Result<Self, SurfaceError> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(token) = &options.bearer {
            config = config.auth_header(token.clone());
        }
        let secrets: Vec<&str> = options.bearer.as_deref().into_iter().collect();
        let credentials = UrlCredentials::of_urls(&[url], &secrets);
        let connected = Self::connect(&redact_url(url), config, options).await;
        match connected {
            Ok(mut surface) => {
                surface.credentials = credentials;
                surface.bearer = options.bearer.is_some();
                Ok(surface)
            }
            Err(e) => Err(scrub_surface_error(&credentials, e)),
        }
    }

    /// Connects over Streamable HTTP; `shown` is the URL as errors name it (redacted).
    async fn connect(
        shown: &str,
        config: StreamableHttpClientTransportConfig,
        options: &McpOptions,
    ) -> Result<Self, SurfaceError> {
        // rmcp's default client opens a TCP connection per request (pooling off, to dodge a
        // delayed-ACK stall); keep-alive with TCP_NODELAY avoids the stall at its cause and the
        // connection churn. No redirects: requests may carry a bearer token.
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| SurfaceError::Connect(format!("{shown}: the HTTP client: {e}")))?;
        let transport = StreamableHttpClientTransport::with_client(http, config);
        Self::serve_named(shown, transport, options).await
    }

    /// Spawns `command` and speaks MCP with it over its stdin and stdout, with the default
    /// [`McpOptions`].
    pub async fn spawn(command: tokio::process::Command) -> Result<Self, SurfaceError> {
        Self::spawn_with(command, &McpOptions::default()).await
    }

    /// Spawns `command` and speaks MCP with it over its stdin and stdout, with `options`. A
    /// server that does not start its session within the connect timeout is stopped.
    pub async fn spawn_with(
        command: tokio::process::Command,
        options: &McpOptions,
    ) -> Result<Self, SurfaceError> {
        let program = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        // Its stderr is passed on to this process's, as an inherited one would be, and its
        // last bytes kept to say why a server that dies at start did.
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| SurfaceError::Connect(format!("could not start `{program}`: {e}")))?;
        let tail = stderr.map(StderrTail::follow);
        match Self::serve_named(&format!("`{program}`"), transport, options).await {
            Ok(surface) => Ok(surface),
            Err(SurfaceError::Connect(why)) => {
                let said = match tail {
                    Some(tail) => tail.last_words().await,
                    None => None,
                };
                Err(SurfaceError::Connect(match said {
                    Some(said) => format!("{why}; it wrote on stderr: {said}"),
                    None => why,
                }))
            }
            Err(e) => Err(e),
        }
    }

    /// Speaks MCP over any of rmcp's transports (an in-memory pipe, a transport the app built
    /// with its own HTTP client or headers, ...): initializes the session and returns the
    /// surface, which relays progress like one made by [`McpSurface::connect_http`]. The
    /// default [`McpOptions`] apply.
    pub async fn serve<T, E, A>(transport: T) -> Result<Self, SurfaceError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::serve_with(transport, &McpOptions::default()).await
    }

    /// [`McpSurface::serve`] with `options` (its connect timeout; a bearer token is the
    /// transport's own business here).
    pub async fn serve_with<T, E, A>(
        transport: T,
        options: &McpOptions,
    ) -> Result<Self, SurfaceError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::serve_named("the MCP server", transport, options).await
    }

    async fn serve_named<T, E, A>(
        what: &str,
        transport: T,
        options: &McpOptions,
    ) -> Result<Self, SurfaceError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        // A server that never answers `initialize` would hold the caller for ever. Given up,
        // the session's future is dropped with the transport in it, which ends the
        // connection and kills a spawned server.
        let routes = ProgressRoutes::default();
        let transport = InOrder {
            inner: transport.into_transport(),
            routes: routes.clone(),
        };
        let client = tokio::time::timeout(options.connect_timeout, routes.serve(transport))
            .await
            .map_err(|_| {
                SurfaceError::Connect(format!(
                    "{what}: no answer to `initialize` within {:?}",
                    options.connect_timeout
                ))
            })?
            .map_err(|e| {
                let why = match &e {
                    rmcp::service::ClientInitializeError::TransportError { error, .. } => {
                        failure_words(error.error.as_ref(), options.bearer.is_some())
                    }
                    e => e.to_string(),
                };
                SurfaceError::Connect(format!("{what}: {why}"))
            })?;
        Ok(Self::with(Client::Routed(client)))
    }

    /// Wraps a client the app connected itself (custom transport, auth headers, ...). Its calls
    /// relay no progress (the client's handler is the app's); [`McpSurface::serve`] takes a
    /// transport instead and does.
    pub fn from_client(client: RunningService<RoleClient, ()>) -> Self {
        Self::with(Client::Plain(client))
    }

    fn with(client: Client) -> Self {
        Self {
            client,
            listed: RwLock::new(HashSet::new()),
            credentials: UrlCredentials::default(),
            bearer: false,
        }
    }

    /// A failed request's error as a [`SurfaceError::Transport`], in words
    /// ([`service_failure`]).
    fn transport_error(&self, e: &ServiceError) -> SurfaceError {
        SurfaceError::Transport(service_failure(e, self.bearer))
    }

    /// The server's name and version, as it introduced itself.
    pub fn server_name(&self) -> Option<String> {
        self.client.peer().peer_info().and_then(|i| {
            i.server_info
                .as_ref()
                .map(|s| format!("{} {}", s.name, s.version))
        })
    }

    /// Ends the session (and stops a spawned server).
    pub async fn close(self) -> Result<(), SurfaceError> {
        let credentials = self.credentials.clone();
        self.client
            .cancel()
            .await
            .map_err(|e| scrub_surface_error(&credentials, SurfaceError::Transport(e.to_string())))
    }

    fn was_listed(&self, name: &str) -> bool {
        self.listed
            .read()
            .map(|l| l.contains(name))
            .unwrap_or(false)
    }
}

/// The last bytes a spawned server wrote on its stderr ([`STDERR_TAIL_BYTES`]), read by a
/// task that passes everything on to this process's stderr as it comes.
struct StderrTail {
    kept: Arc<std::sync::Mutex<std::collections::VecDeque<u8>>>,
    ended: tokio::sync::watch::Receiver<bool>,
}

/// How much of a spawned server's stderr is kept to quote, from its end.
const STDERR_TAIL_BYTES: usize = 4096;

/// The most lines, from the end, of a spawned server's stderr a connect error quotes.
const STDERR_QUOTED_LINES: usize = 6;

/// How long a failed start waits for the server's stderr to end (it has exited, or was just
/// stopped) before quoting what came.
const STDERR_END_WAIT: Duration = Duration::from_secs(2);

impl StderrTail {
    fn follow(mut stderr: tokio::process::ChildStderr) -> Self {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let kept: Arc<std::sync::Mutex<std::collections::VecDeque<u8>>> = Arc::default();
        let (done, ended) = tokio::sync::watch::channel(false);
        let tail = Arc::clone(&kept);
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            // Written without blocking a worker when this process's stderr is slow to drain.
            let mut own = tokio::io::stderr();
            while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
                let _ = own.write_all(&chunk[..n]).await;
                if let Ok(mut kept) = tail.lock() {
                    kept.extend(&chunk[..n]);
                    let over = kept.len().saturating_sub(STDERR_TAIL_BYTES);
                    kept.drain(..over);
                }
            }
            let _ = done.send(true);
        });
        Self { kept, ended }
    }

    /// The last lines written, escaped and joined on one line; `None` when it wrote nothing.
    /// Waits a moment for the rest of what a dying server wrote.
    async fn last_words(mut self) -> Option<String> {
        let _ = tokio::time::timeout(STDERR_END_WAIT, self.ended.wait_for(|ended| *ended)).await;
        let bytes: Vec<u8> = self.kept.lock().ok()?.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let last = &lines[lines.len().saturating_sub(STDERR_QUOTED_LINES)..];
        if last.is_empty() {
            return None;
        }
        let quoted: Vec<String> = last.iter().map(|l| kberg_core::quoted(l, 300)).collect();
        Some(quoted.join(" | "))
    }
}

/// Why a request to the server failed, in words that name no client-library type: rmcp's
/// wrapper of a transport's error names the transport's Rust type, so the transport's own error
/// is told instead, and a Streamable HTTP refusal of the credentials (401, 403) says what to do.
/// `bearer`: the requests carried a bearer token.
fn failure_words(error: &(dyn std::error::Error + 'static), bearer: bool) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut cause = Some(error);
    while let Some(now) = cause {
        if let Some(http) = now.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return match http {
                StreamableHttpError::AuthRequired(_) if bearer => {
                    "the server refused the bearer token (401 Unauthorized): check the token"
                        .to_string()
                }
                StreamableHttpError::AuthRequired(_) => {
                    "the server wants credentials (401 Unauthorized): connect with its bearer token (`McpOptions::bearer`)".to_string()
                }
                StreamableHttpError::InsufficientScope(e) => format!(
                    "the server refused the request for the token's scope (403 Forbidden){}",
                    e.required_scope
                        .as_deref()
                        .map(|s| format!(": it asks for `{s}`"))
                        .unwrap_or_default()
                ),
                other => other.to_string(),
            };
        }
        cause = now.source();
    }
    error.to_string()
}

/// [`failure_words`] for a request's error.
fn service_failure(e: &ServiceError, bearer: bool) -> String {
    match e {
        ServiceError::TransportSend(e) => failure_words(e.error.as_ref(), bearer),
        ServiceError::TransportClosed => "the connection closed".to_string(),
        e => e.to_string(),
    }
}

/// Content blocks as the model reads them ([`crate::surface::blocks_text`]), as a result from
/// a [`crate::LocalSurface`] reads: an embedded resource's text (or bytes of a text type,
/// decoded from base64) with its URI, a link with its name, URI and description.
fn blocks_text(content: &[ContentBlock]) -> crate::surface::Shown {
    use crate::surface::{Block, is_text_mime};
    use base64::Engine as _;
    use rmcp::model::{ResourceContents, Role};
    crate::surface::blocks_text(content.iter().map(|block| {
        let annotations = match block {
            ContentBlock::Text(t) => t.annotations.as_ref(),
            ContentBlock::Image(i) => i.annotations.as_ref(),
            ContentBlock::Audio(a) => a.annotations.as_ref(),
            ContentBlock::Resource(r) => r.annotations.as_ref(),
            ContentBlock::ResourceLink(link) => link.annotations.as_ref(),
            _ => None,
        };
        let for_model = annotations
            .and_then(|a| a.audience.as_ref())
            .is_none_or(|audience| audience.contains(&Role::Assistant));
        let block = match block {
            ContentBlock::Text(t) => Block::Text(&t.text),
            ContentBlock::Image(i) => Block::Media {
                kind: "image",
                mime: &i.mime_type,
            },
            ContentBlock::Audio(a) => Block::Media {
                kind: "audio",
                mime: &a.mime_type,
            },
            ContentBlock::ResourceLink(link) => Block::Link {
                name: &link.name,
                uri: &link.uri,
                description: link.description.as_deref(),
            },
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Block::Resource {
                    uri,
                    mime: mime_type.as_deref(),
                    text: Some(std::borrow::Cow::Borrowed(text.as_str())),
                },
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Block::Resource {
                    uri,
                    mime: mime_type.as_deref(),
                    text: is_text_mime(mime_type.as_deref())
                        .then(|| base64::engine::general_purpose::STANDARD.decode(blob).ok())
                        .flatten()
                        .and_then(|bytes| String::from_utf8(bytes).ok())
                        .map(std::borrow::Cow::Owned),
                },
                _ => Block::Other("resource"),
            },
            _ => Block::Other("content"),
        };
        (block, for_model)
    }))
}

fn to_result(r: CallToolResult) -> ToolResult {
    let is_error = r.is_error.unwrap_or(false);
    let (text, user_text) = blocks_text(&r.content).texts(r.structured_content.as_ref());
    let code = if is_error {
        r.structured_content.as_ref().and_then(code_of)
    } else {
        None
    };
    ToolResult {
        text,
        user_text,
        is_error,
        code,
        structured: r.structured_content,
    }
}

#[async_trait]
impl ToolSurface for McpSurface {
    async fn tools(&self) -> Result<Vec<ToolDefinition>, SurfaceError> {
        let tools = self
            .list_tools()
            .await
            .map_err(|e| scrub_surface_error(&self.credentials, e))?;
        let defs: Vec<ToolDefinition> = tools
            .into_iter()
            .filter(|t| crate::surface::for_the_model(t.meta.as_ref().map(|m| &m.0)))
            .map(|t| {
                // MCP's default for `readOnlyHint` is false: a tool that says nothing may write.
                let read_only = t
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false);
                ToolDefinition::new(
                    t.name.into_owned(),
                    t.description.map(|d| d.into_owned()).unwrap_or_default(),
                    Value::Object((*t.input_schema).clone()),
                )
                .read_only(read_only)
            })
            .collect();
        if let Ok(mut listed) = self.listed.write() {
            *listed = defs.iter().map(|d| d.name.clone()).collect();
        }
        Ok(defs)
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<ToolResult, SurfaceError> {
        self.call_routed(name, arguments, cancel, None)
            .await
            .map_err(|e| scrub_surface_error(&self.credentials, e))
    }

    async fn call_with_progress(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress: ProgressSink,
    ) -> Result<ToolResult, SurfaceError> {
        self.call_routed(name, arguments, cancel, Some(progress))
            .await
            .map_err(|e| scrub_surface_error(&self.credentials, e))
    }
}

impl McpSurface {
    /// Every page of the server's `tools/list`, within bounds: each page is awaited at most
    /// [`LIST_PAGE_TIMEOUT`], and a list that repeats a cursor or has not ended after
    /// [`MAX_TOOL_LIST_PAGES`] pages is refused as malformed (a server whose cursor never ends
    /// would otherwise hold the run and grow the list for ever).
    async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, SurfaceError> {
        let peer = self.client.peer();
        read_pages(MAX_TOOL_LIST_PAGES, |cursor| async move {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = tokio::time::timeout(LIST_PAGE_TIMEOUT, peer.list_tools(Some(params)))
                .await
                .map_err(|_| {
                    SurfaceError::Transport(format!(
                        "the server did not answer tools/list within {} s",
                        LIST_PAGE_TIMEOUT.as_secs()
                    ))
                })?
                .map_err(|e| self.transport_error(&e))?;
            Ok((page.tools, page.next_cursor))
        })
        .await
        .map_err(|e| match e {
            PagesError::Page(e) => e,
            PagesError::RepeatedCursor => {
                SurfaceError::Malformed("the server's tools/list repeats a page cursor".into())
            }
            PagesError::TooManyPages(n) => SurfaceError::Malformed(format!(
                "the server's tools/list did not end after {n} pages"
            )),
        })
    }

    /// One `tools/call`; with a sink (and a client that routes progress), the call's progress
    /// goes to the sink until the call returns.
    async fn call_routed(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<ToolResult, SurfaceError> {
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                // MCP arguments are an object; say so as a validation failure the model can fix.
                return Ok(ToolResult::error(
                    ErrorCode::InvalidArguments,
                    format!(
                        "The arguments for `{name}` are invalid (1 problem). Fix these and call it again:\n- the arguments must be an object, but they are {}.",
                        short_kind(&other)
                    ),
                ));
            }
        };
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = arguments;
        params.meta = Some(tasks_meta());
        let peer = self.client.peer();
        // The call's progress route, held until this call returns (also while its task runs).
        let mut _route = None;
        // Polls of the call's task that answer `working` are signs of work too.
        let alive = progress.clone();
        let sent = peer
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await;
        let outcome = match sent {
            Err(e) => Err(e),
            Ok(handle) => {
                // rmcp gives every request a progress token of its own.
                if let (Some(routes), Some(sink)) = (self.client.routes(), progress) {
                    _route = Some(routes.route(handle.progress_token.clone(), sink));
                }
                let id = handle.id.clone();
                // Dropped unanswered (the whole run was dropped, not cancelled), the call is
                // still cancelled on the server.
                let (peer_told, id_told) = (peer.clone(), id.clone());
                let mut guard = SpawnOnDrop::new(async move {
                    let _ = send_cancel_notice(&peer_told, id_told).await;
                });
                let mut response = std::pin::pin!(handle.await_response());
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        // The server may have started a task already: its answer, which names
                        // it, is awaited a moment longer so the task can be cancelled too. A
                        // call still unanswered after that is cancelled on the server. (The
                        // guard stays armed while this waits: a call dropped meanwhile is
                        // still cancelled.)
                        let late = tokio::time::timeout(LATE_TASK_GRACE, response).await;
                        guard.disarm();
                        match late {
                            Ok(Ok(ServerResult::CreateTaskResult(t))) => {
                                self.cancel_task(&t.task.task_id).await;
                            }
                            // Answered or failed: nothing of it runs on the server any more.
                            Ok(_) => {}
                            Err(_) => self.cancel_request(name, id).await,
                        }
                        return Ok(cancelled(name));
                    }
                    r = &mut response => {
                        guard.disarm();
                        r.and_then(call_response)
                    }
                }
            }
        };
        let outcome = match outcome {
            Ok(CallToolResponse::Complete(r)) => Ok(r),
            Ok(CallToolResponse::Task(t)) => {
                return self
                    .wait_for_task(name, t.task, &cancel, alive.as_ref())
                    .await;
            }
            // Only a 2026-07-28 session answers input_required, and this client speaks 2025-11-25.
            Ok(_) => {
                return Ok(ToolResult::error(
                    ErrorCode::ToolFailed,
                    format!("The tool `{name}` asked for input this agent cannot give."),
                ));
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(r) => Ok(to_result(r)),
            Err(ServiceError::McpError(e)) => {
                let code = if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
                    || (e.code == rmcp::model::ErrorCode::INVALID_PARAMS && !self.was_listed(name))
                {
                    ErrorCode::UnknownTool
                } else if e.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                    ErrorCode::InvalidArguments
                } else {
                    ErrorCode::ToolFailed
                };
                let text = match code {
                    ErrorCode::UnknownTool => format!(
                        "There is no tool named `{name}`. Use one of the tools you were given."
                    ),
                    _ => format!("The tool `{name}` failed: {}", e.message),
                };
                Ok(ToolResult::error(code, text))
            }
            Err(e) => Err(self.transport_error(&e)),
        }
    }
}

/// The `_meta` of a request declaring the tasks extension (this client's session declares
/// nothing at `initialize`, so the extension is declared per request).
fn tasks_meta() -> RequestMetaObject {
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(tasks_capability());
    meta
}

/// The client capabilities of a call: the tasks extension.
fn tasks_capability() -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    caps.extensions = Some(
        [(
            rmcp::model::TASKS_EXTENSION_ID.to_string(),
            serde_json::Map::new(),
        )]
        .into_iter()
        .collect(),
    );
    caps
}

/// Tells the server that the call `id` was cancelled by the agent, waiting at most
/// [`CANCEL_NOTICE_WAIT`] for the transport to send the notice.
async fn send_cancel_notice(
    peer: &rmcp::Peer<RoleClient>,
    id: RequestId,
) -> Result<Result<(), ServiceError>, tokio::time::error::Elapsed> {
    let notice = CancelledNotification::new(CancelledNotificationParam::new(
        Some(id),
        Some("cancelled by the agent".to_string()),
    ));
    tokio::time::timeout(CANCEL_NOTICE_WAIT, peer.send_notification(notice.into())).await
}

/// Asks the server to cancel the task `id` and waits (at most [`CANCEL_NOTICE_WAIT`]) for its
/// answer.
async fn send_cancel_task(
    peer: &rmcp::Peer<RoleClient>,
    id: &str,
) -> Result<Result<(), ServiceError>, tokio::time::error::Elapsed> {
    let mut params = CancelTaskParams::new(id.to_string());
    params.meta = Some(tasks_meta());
    tokio::time::timeout(CANCEL_NOTICE_WAIT, peer.cancel_task(params)).await
}

/// What a server answered to `tools/call`: a result, a request for input, or a task. An answer
/// without content is an empty result; any other kind of answer is unexpected.
fn call_response(answer: ServerResult) -> Result<CallToolResponse, ServiceError> {
    match answer {
        ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
        ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
        ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
        // Content-less answers, as rmcp's own `call_tool` takes them: `{}`, a task
        // acknowledgement, or an object with nothing but `_meta`.
        ServerResult::EmptyResult(_) | ServerResult::TaskAckResult(_) => {
            Ok(CallToolResponse::Complete(CallToolResult::default()))
        }
        ServerResult::CustomResult(c)
            if c.0
                .as_object()
                .is_some_and(|o| o.keys().all(|k| k == "_meta")) =>
        {
            Ok(CallToolResponse::Complete(CallToolResult::default()))
        }
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

fn cancelled(name: &str) -> ToolResult {
    ToolResult::error(
        ErrorCode::Cancelled,
        format!("The call to `{name}` was cancelled before it finished."),
    )
}

/// The most `tools/list` pages a surface reads (see [`McpSurface`]'s listing).
pub const MAX_TOOL_LIST_PAGES: usize = 100;

/// How long a surface waits for one `tools/list` page.
const LIST_PAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a surface waits for the answer to one `tasks/get` poll of a call's task.
const TASK_POLL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long sending a call's cancellation may take before the call returns anyway.
const CANCEL_NOTICE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a cancelled call's answer is still awaited to learn whether it started a task.
const LATE_TASK_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Bounds of the polling interval, whatever the server suggests.
const MIN_POLL: std::time::Duration = std::time::Duration::from_millis(50);
const MAX_POLL: std::time::Duration = std::time::Duration::from_secs(5);

impl McpSurface {
    /// Waits for the task a call started and answers with its result. The task's creation and
    /// each poll that finds it working are signs of work, told to `alive`
    /// ([`ProgressSink::alive`]).
    async fn wait_for_task(
        &self,
        name: &str,
        task: Task,
        cancel: &CancellationToken,
        alive: Option<&ProgressSink>,
    ) -> Result<ToolResult, SurfaceError> {
        let id = task.task_id;
        // Dropped while it waits (the whole run was dropped, not cancelled), the call still
        // cancels its task on the server: nobody would read what it makes, and a task that
        // never ends would run on. Once the polling returns, it has ended the task or let go.
        let mut guard = {
            let (peer, id) = (self.client.peer().clone(), id.clone());
            SpawnOnDrop::new(async move {
                let _ = send_cancel_task(&peer, &id).await;
            })
        };
        let answer = self.poll_task(name, &id, cancel, alive).await;
        guard.disarm();
        answer
    }

    /// Polls the task `id` of a call until it ends ([`McpSurface::wait_for_task`]).
    async fn poll_task(
        &self,
        name: &str,
        id: &str,
        cancel: &CancellationToken,
        alive: Option<&ProgressSink>,
    ) -> Result<ToolResult, SurfaceError> {
        let id = id.to_string();
        let alive = || {
            if let Some(sink) = alive {
                sink.alive();
            }
        };
        alive();
        let mut wait = std::time::Duration::ZERO;
        loop {
            let got = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.cancel_task(&id).await;
                    return Ok(cancelled(name));
                }
                r = async {
                    tokio::time::sleep(wait).await;
                    let mut params = GetTaskParams::new(id.clone());
                    params.meta = Some(tasks_meta());
                    tokio::time::timeout(TASK_POLL_TIMEOUT, self.client.peer().get_task(params))
                        .await
                } => r,
            };
            let Ok(got) = got else {
                // A server that stopped answering: the call ends, and the task is cancelled in
                // case it recovers.
                self.cancel_task(&id).await;
                return Err(SurfaceError::Transport(format!(
                    "the server did not answer `tasks/get` for the task of `{name}` within {} s",
                    TASK_POLL_TIMEOUT.as_secs()
                )));
            };
            let detailed = match got {
                Ok(r) => r.task,
                Err(ServiceError::McpError(e)) => {
                    return Ok(ToolResult::error(
                        ErrorCode::ToolFailed,
                        format!(
                            "The tool `{name}` failed: its task is gone ({}).",
                            e.message
                        ),
                    ));
                }
                Err(e) => return Err(self.transport_error(&e)),
            };
            wait = detailed
                .task
                .poll_interval_ms
                .map(std::time::Duration::from_millis)
                .unwrap_or(std::time::Duration::from_millis(500))
                .clamp(MIN_POLL, MAX_POLL);
            match detailed.payload {
                TaskPayload::Completed { result } => {
                    return match serde_json::from_value::<CallToolResult>(Value::Object(result)) {
                        Ok(r) => Ok(to_result(r)),
                        Err(e) => Ok(ToolResult::error(
                            ErrorCode::ToolFailed,
                            format!(
                                "The tool `{name}` failed: its task's result is malformed ({e})."
                            ),
                        )),
                    };
                }
                TaskPayload::Failed { error } => {
                    let message = error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no message");
                    return Ok(ToolResult::error(
                        ErrorCode::ToolFailed,
                        format!("The tool `{name}` failed: {message}"),
                    ));
                }
                TaskPayload::Cancelled => return Ok(cancelled(name)),
                TaskPayload::InputRequired { .. } => {
                    self.cancel_task(&id).await;
                    return Ok(ToolResult::error(
                        ErrorCode::ToolFailed,
                        format!(
                            "The tool `{name}` asked for input this agent cannot give, so it was cancelled."
                        ),
                    ));
                }
                // Working (or a status this version does not know): wait and look again.
                _ => {
                    alive();
                }
            }
        }
    }

    /// Tells the server that the call `id` is cancelled and waits (at most
    /// [`CANCEL_NOTICE_WAIT`]) until the transport has sent the notice, best effort: the
    /// surface may be dropped as soon as the call returns, which would lose a notice still
    /// queued.
    async fn cancel_request(&self, name: &str, id: RequestId) {
        match send_cancel_notice(self.client.peer(), id).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(tool = ?name, error = ?e.to_string(), "the cancellation was not sent")
            }
            Err(_) => tracing::debug!(tool = ?name, "the cancellation was not sent in time"),
        }
    }

    /// Cancels a task, best effort, waiting at most [`CANCEL_NOTICE_WAIT`] for the server's
    /// answer (a server that does not answer must not hold the cancelled call).
    async fn cancel_task(&self, id: &str) {
        match send_cancel_task(self.client.peer(), id).await {
            Ok(Ok(_)) => {}
            // `?`: the error quotes the server's message, whose line breaks written as they
            // are would start a log line of the server's choosing.
            Ok(Err(e)) => {
                tracing::debug!(task = ?id, error = ?e.to_string(), "the task was not cancelled")
            }
            Err(_) => tracing::debug!(
                task = ?id,
                "the task's cancellation was not answered in time"
            ),
        }
    }
}

fn short_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_route_goes_when_the_call_ends() {
        let routes = ProgressRoutes::default();
        let token = |n| ProgressToken(rmcp::model::NumberOrString::Number(n));
        let first = routes.route(token(1), ProgressSink::new(|_| {}));
        let second = routes.route(token(2), ProgressSink::new(|_| {}));
        assert_eq!(routes.len(), 2);
        drop(first);
        assert_eq!(routes.len(), 1);
        assert!(routes.lock().contains_key(&token(2)));
        drop(second);
        assert_eq!(routes.len(), 0);
    }
}
