//! The load generator of the wire-level benches (`wire.rs`, `aggregate.rs`): MCP clients that
//! speak Streamable HTTP over one keep-alive loopback connection each, and the measurement loop
//! that drives N of them at once and reports throughput, latency percentiles and CPU per call.
//!
//! Why not rmcp's client: the generator's own cost is part of every figure, so it is kept as
//! small and as identical between servers as possible: a bare hyper HTTP/1.1 connection with
//! TCP_NODELAY (see PERFORMANCE.md for the delayed-ACK trap), the JSON-RPC bodies the MCP
//! specification defines, and a byte search for the expected answer instead of a full parse.
//! Both protocol generations are spoken: 2025-11-25 (an `initialize`d session per client, calls
//! answered as JSON or as a small SSE stream, whichever the server chooses) and 2026-07-28
//! (stateless: `_meta` and the `Mcp-Method` / `Mcp-Name` headers on every call).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// The stateful generation: `initialize`, a session per client.
pub const STATEFUL: &str = "2025-11-25";
/// The stateless generation: no handshake, `_meta` and `Mcp-*` headers on every call.
pub const STATELESS: &str = "2026-07-28";

/// The error type of the bench helpers (a bench reports and exits; nothing matches on it).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One `tools/call` a client repeats: the tool, its arguments, and a byte string every correct
/// answer contains.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The tool's name as the server lists it.
    pub name: String,
    /// The arguments object.
    pub arguments: Value,
    /// Bytes that must appear in the answer body (the echoed text).
    pub expect: String,
}

impl ToolCall {
    /// A call of `name` with `arguments` whose answer must contain `expect`.
    pub fn new(name: impl Into<String>, arguments: Value, expect: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            arguments,
            expect: expect.into(),
        }
    }
}

/// One client: a keep-alive HTTP/1.1 connection and, on 2025-11-25, an MCP session.
pub struct Client {
    send: SendRequest<Full<Bytes>>,
    host: String,
    path: String,
    session: Option<String>,
    protocol: &'static str,
    next_id: u64,
    bearer: Option<String>,
}

impl Client {
    /// Connects to `addr` (TCP_NODELAY) and, when `handshake` is set and `protocol` is
    /// [`STATEFUL`], opens a session (`initialize`, then `notifications/initialized`). Requests
    /// go to `path` (e.g. `/mcp`).
    pub async fn connect(
        addr: SocketAddr,
        path: &str,
        protocol: &'static str,
        handshake: bool,
    ) -> Result<Self, BoxError> {
        Self::connect_as(addr, path, protocol, handshake, None).await
    }

    /// As [`Client::connect`], sending `Authorization: Bearer <bearer>` from the first request
    /// on (the handshake included), as a server with per-agent auth needs.
    pub async fn connect_as(
        addr: SocketAddr,
        path: &str,
        protocol: &'static str,
        handshake: bool,
        bearer: Option<&str>,
    ) -> Result<Self, BoxError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut c = Self {
            send,
            host: addr.to_string(),
            path: path.to_string(),
            session: None,
            protocol,
            next_id: 1,
            bearer: bearer.map(str::to_string),
        };
        if handshake && protocol == STATEFUL {
            let (status, headers, _) = c
                .post(
                    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": STATEFUL,
                        "capabilities": {},
                        "clientInfo": {"name": "kberg-bench", "version": "1.0.0"}
                    }}),
                )
                .await?;
            if status != StatusCode::OK {
                return Err(format!("initialize answered {status}").into());
            }
            let sid = headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .ok_or("initialize gave no session id")?;
            c.session = Some(sid.to_string());
            let (status, _, _) = c
                .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await?;
            if !status.is_success() {
                return Err(format!("notifications/initialized answered {status}").into());
            }
        }
        Ok(c)
    }

    /// The session id the handshake was given, if any.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Sends `Mcp-Session-Id: <id>` with every later request (a session opened by another
    /// client, perhaps on another server instance that shares its sessions).
    pub fn with_session(mut self, id: impl Into<String>) -> Self {
        self.session = Some(id.into());
        self
    }

    /// Sends `Authorization: Bearer <token>` with every later request (a server with per-agent
    /// auth, such as the Bridle gateway).
    pub fn with_bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Posts one JSON-RPC message and reads the whole answer.
    pub async fn post(
        &mut self,
        body: Value,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), BoxError> {
        let mut req = Request::post(self.path.as_str())
            .header("host", self.host.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", self.protocol);
        if self.protocol == STATELESS
            && let Some(method) = body["method"].as_str()
        {
            req = req.header("mcp-method", method);
            if let Some(name) = body["params"]["name"].as_str() {
                req = req.header("mcp-name", name);
            }
        }
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s.as_str());
        }
        if let Some(t) = &self.bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::from(body.to_string())))?;
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await?.to_bytes();
        Ok((status, parts.headers, bytes))
    }

    /// Ends the client's session, as a well-behaved client does when it is done
    /// (`DELETE` with its `Mcp-Session-Id`), so that a server with a session limit has room for
    /// the next measurement's clients. Nothing to do without a session; a server that does not
    /// let clients end sessions (`405`) is fine too.
    pub async fn close(mut self) -> Result<(), BoxError> {
        let Some(sid) = self.session.take() else {
            return Ok(());
        };
        let mut req = Request::delete(self.path.as_str())
            .header("host", self.host.as_str())
            .header("mcp-protocol-version", self.protocol)
            .header("mcp-session-id", sid.as_str());
        if let Some(t) = &self.bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::new()))?;
        self.send.ready().await?;
        let status = self.send.send_request(req).await?.status();
        if status.is_success() || status == StatusCode::METHOD_NOT_ALLOWED {
            Ok(())
        } else {
            Err(format!("ending the session answered {status}").into())
        }
    }

    /// One `tools/call` round trip; checks the answer is 200 and contains `call.expect`.
    pub async fn call(&mut self, call: &ToolCall) -> Result<(), BoxError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut params = json!({"name": call.name, "arguments": call.arguments});
        if self.protocol == STATELESS {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "kberg-bench", "version": "1.0.0"}
            });
        }
        let (status, _, body) = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .await?;
        if status != StatusCode::OK {
            return Err(format!("tools/call answered {status}").into());
        }
        let needle = call.expect.as_bytes();
        if needle.is_empty() || !body.windows(needle.len()).any(|w| w == needle) {
            return Err(format!(
                "tools/call answer lacks {:?}: {}",
                call.expect,
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        Ok(())
    }
}

/// What one measurement produced.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Completed calls per second of wall time.
    pub rps: f64,
    /// Median round trip, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile round trip, milliseconds.
    pub p99_ms: f64,
    /// CPU time of the whole process (load generator and in-process servers) per call, in
    /// microseconds ([`measure_cpu_of`] reads it from another source, such as a server's child
    /// process). The generator's share is the same for every server, so differences are
    /// server cost; and unlike req/s it hardly moves when other processes compete for the cores.
    /// It does not include child processes (a Node upstream's CPU is not in it).
    pub cpu_us: f64,
    /// How many calls were timed.
    pub calls: usize,
}

impl Point {
    /// The median of each field over several rounds (`calls` is summed).
    pub fn median_of(points: &[Point]) -> Point {
        Point {
            rps: median(points.iter().map(|p| p.rps).collect()),
            p50_ms: median(points.iter().map(|p| p.p50_ms).collect()),
            p99_ms: median(points.iter().map(|p| p.p99_ms).collect()),
            cpu_us: median(points.iter().map(|p| p.cpu_us).collect()),
            calls: points.iter().map(|p| p.calls).sum(),
        }
    }
}

/// The median of `v` (the upper one for an even count); NaN when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU time (user + system) this process has used so far, from `/proc/self/stat` (Linux; the
/// kernel reports it in USER_HZ ticks, 100 per second). `None` elsewhere.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) closed by the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU time (user + system) process `pid` has used so far: the sum over its threads of the
/// first field of `/proc/<pid>/task/<tid>/schedstat`, nanoseconds on a CPU (Linux). Finer than
/// [`process_cpu`]'s ticks, for short measurements of a server in a child process; the time of
/// a thread that ended between two readings is not in the second one. `None` elsewhere or when
/// the process is gone.
pub fn pid_cpu(pid: u32) -> Option<Duration> {
    let mut ns: u64 = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(stat) = std::fs::read_to_string(task.ok()?.path().join("schedstat")) else {
            // A thread that ended after the listing.
            continue;
        };
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

/// A server in a child process of the running bench binary: the binary is started again with
/// `role_var=role` (and `envs`), starts its server, writes `listening <address>` on stdout (see
/// [`serve_in_child`]) and serves until its stdin closes. Killed by its pid (through
/// `Child::kill`) when dropped, also when the bench fails. A bench measures such a server's CPU
/// time with [`pid_cpu`].
pub struct ChildServer {
    child: std::process::Child,
    /// The address the child serves on.
    pub addr: SocketAddr,
}

impl ChildServer {
    /// Starts the child and waits for its address.
    pub fn start(role_var: &str, role: &str, envs: &[(&str, String)]) -> Result<Self, BoxError> {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .env(role_var, role)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take();
        // From here on, an error drops `me`, which kills the child.
        let mut me = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let mut line = String::new();
        std::io::BufReader::new(stdout.ok_or("the server child has no stdout")?)
            .read_line(&mut line)?;
        me.addr = line
            .trim()
            .strip_prefix("listening ")
            .ok_or_else(|| format!("the {role} server child said {line:?}, not its address"))?
            .parse()?;
        Ok(me)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side of [`ChildServer`]: announces `addr` on stdout, then waits until stdin is
/// closed (by the parent, or by its end) and cancels `stop`.
#[allow(clippy::print_stdout)] // the address line is the parent's protocol with the child
pub async fn serve_in_child(addr: SocketAddr, stop: tokio_util::sync::CancellationToken) {
    println!("listening {addr}");
    let closed = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        closed.cancel();
    });
    stop.cancelled().await;
}

/// How long one measurement runs.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// Every client calls until this much time has passed.
    Time(Duration),
    /// Every client makes this many calls.
    Calls(usize),
}

/// Connects `clients` clients to `addr`, warms each up with one call, then lets them all call
/// `call` back to back until `budget` is spent, and reports the result.
pub async fn measure(
    addr: SocketAddr,
    path: &str,
    protocol: &'static str,
    handshake: bool,
    clients: usize,
    call: &ToolCall,
    budget: Budget,
) -> Result<Point, BoxError> {
    measure_as(addr, path, protocol, handshake, None, clients, call, budget).await
}

/// [`measure`] with `Authorization: Bearer <bearer>` on every request, when given (a server
/// with per-agent auth, such as the Bridle gateway). The handshake, when asked for, is sent
/// without it.
#[allow(clippy::too_many_arguments)] // measure's parameters plus the credential
pub async fn measure_as(
    addr: SocketAddr,
    path: &str,
    protocol: &'static str,
    handshake: bool,
    bearer: Option<&str>,
    clients: usize,
    call: &ToolCall,
    budget: Budget,
) -> Result<Point, BoxError> {
    let target = Target {
        addr,
        path,
        protocol,
        handshake,
        bearer,
    };
    measure_cpu_of(target, clients, call, budget, &process_cpu).await
}

/// Where [`measure_cpu_of`] sends its calls and how it opens a client.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The server's address.
    pub addr: SocketAddr,
    /// The MCP endpoint's path.
    pub path: &'a str,
    /// The protocol generation every request names.
    pub protocol: &'static str,
    /// Whether each client `initialize`s a session first.
    pub handshake: bool,
    /// `Authorization: Bearer <bearer>` on every request but the handshake, when given.
    pub bearer: Option<&'a str>,
}

/// [`measure_as`] with the CPU time read from `cpu` before and after the timed part, so that
/// [`Point::cpu_us`] can be a server's in another process (see [`pid_cpu`]) instead of this
/// process's.
pub async fn measure_cpu_of(
    target: Target<'_>,
    clients: usize,
    call: &ToolCall,
    budget: Budget,
    cpu: &(dyn Fn() -> Option<Duration> + Sync),
) -> Result<Point, BoxError> {
    let Target {
        addr,
        path,
        protocol,
        handshake,
        bearer,
    } = target;
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(Client::connect_as(addr, path, protocol, handshake, bearer).await?);
    }
    // Warm up each connection (and the server's session) before the clock starts.
    for c in &mut conns {
        c.call(call).await?;
    }
    let cpu_start = cpu();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for mut c in conns {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(4096);
            loop {
                let more = match budget {
                    Budget::Time(d) => start.elapsed() < d,
                    Budget::Calls(n) => lat.len() < n,
                };
                if !more {
                    break;
                }
                let t = Instant::now();
                c.call(&call).await?;
                lat.push(t.elapsed());
            }
            Ok::<_, BoxError>((lat, c))
        }));
    }
    let mut all = Vec::new();
    let mut done = Vec::with_capacity(clients);
    for t in tasks {
        let (lat, c) = t.await??;
        all.extend(lat);
        done.push(c);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = match (cpu_start, cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
        _ => f64::NAN,
    };
    // After the clock: the sessions this measurement opened are ended, so that rounds do not
    // pile them up against the server's session limit.
    for c in done {
        c.close().await?;
    }
    if all.is_empty() {
        return Err("no call completed".into());
    }
    all.sort_unstable();
    let pct = |p: f64| {
        let i = ((all.len() as f64 - 1.0) * p).round() as usize;
        all[i.min(all.len() - 1)].as_secs_f64() * 1000.0
    };
    Ok(Point {
        rps: all.len() as f64 / elapsed,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        cpu_us: cpu * 1e6 / all.len() as f64,
        calls: all.len(),
    })
}

/// A number from the environment, or `default` when unset or unreadable.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `main` of a bench that is a plain binary: runs `run` on a multi-thread tokio runtime
/// (`workers` worker threads, or tokio's default), ends the runtime's remaining tasks (the
/// servers it started), and exits with status 1 saying `"{name} failed: {error}"` if `run`
/// failed or the runtime could not start.
pub fn run_main<F>(name: &str, workers: Option<usize>, run: F)
where
    F: std::future::Future<Output = Result<(), BoxError>>,
{
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    let outcome = match builder.enable_all().build() {
        Ok(rt) => {
            let outcome = rt.block_on(run);
            drop(rt);
            outcome
        }
        Err(e) => Err(format!("cannot start the runtime: {e}").into()),
    };
    if let Err(e) = outcome {
        eprintln!("{name} failed: {e}");
        std::process::exit(1);
    }
}
