//! The toy: Kberg end to end, as the seed describes it.
//!
//! A tiny notes app registers its tools: `list_notes` (Read, small-model-safe), `add_note`
//! (Write under `notes.write`, small-model-safe), `export_notes` (Read, not small-model-safe, so a
//! small model never sees it) and the refusal `delete_all_notes`. It serves them over MCP
//! (Streamable HTTP on a free loopback port, through kberg-server), and a local Ollama model
//! drives them through kberg-agent's loop, connected as an MCP client like any other agent.
//!
//! ```text
//! ollama pull qwen2.5 && cargo run --example toy
//! KBERG_MODEL=llama3.2 cargo run --example toy            # another model
//! OLLAMA_HOST=http://10.0.0.5:11434 cargo run --example toy
//! cargo run --example toy -- "Add a note: call the plumber"  # your own request
//! ```
//!
//! Without a running Ollama (or without the model) it says exactly what to do and exits 1.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, McpSurface, Message, ProviderError, RunOutcome, StopReason,
};
use kberg_core::{
    Grants, Principal, SurfaceProjection, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability,
};
use kberg_providers::ollama::{OllamaConfig, OllamaProvider};
use kberg_server::{HttpConfig, HttpServer, McpApp, OpenAccess};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    /// The note's text.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct Empty {}

type Notes = Arc<Mutex<Vec<String>>>;

fn notes_app(notes: &Notes) -> Result<ToolRegistry, kberg_core::CoreError> {
    let tools = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Create notes");
    tools.declare(write.clone())?;
    let n = Arc::clone(notes);
    tools.register(
        ToolBuilder::new("list_notes")
            .description("List all notes")
            .small_model_safe()
            .handler(move |_: Empty, _| {
                let n = Arc::clone(&n);
                async move {
                    let notes = n.lock().map_err(|_| "the notes are unavailable")?;
                    Ok(ToolOutput::text(if notes.is_empty() {
                        "There are no notes.".to_string()
                    } else {
                        notes
                            .iter()
                            .enumerate()
                            .map(|(i, t)| format!("{}. {t}", i + 1))
                            .collect::<Vec<_>>()
                            .join("\n")
                    }))
                }
            }),
    )?;
    let n = Arc::clone(notes);
    tools.register(
        ToolBuilder::new("add_note")
            .description("Add a note with the given text")
            .write(write)
            .small_model_safe()
            .handler(move |a: AddNote, _| {
                let n = Arc::clone(&n);
                async move {
                    let mut notes = n.lock().map_err(|_| "the notes are unavailable")?;
                    notes.push(a.text.clone());
                    Ok(ToolOutput::text(format!(
                        "Added note {}: {}",
                        notes.len(),
                        a.text
                    )))
                }
            }),
    )?;
    let n = Arc::clone(notes);
    tools.register(
        ToolBuilder::new("export_notes")
            .description("Export every note as JSON")
            .handler(move |_: Empty, _| {
                let n = Arc::clone(&n);
                async move {
                    let notes = n.lock().map_err(|_| "the notes are unavailable")?;
                    ToolOutput::json(&*notes)
                }
            }),
    )?;
    tools.refuse(
        "delete_all_notes",
        "bulk deletion is never offered to models; the user deletes notes in the app",
    )?;
    Ok(tools)
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
}

fn report(outcome: &RunOutcome) {
    for c in &outcome.calls {
        let how = if c.recovered_from_text {
            " (recovered from the text)"
        } else {
            ""
        };
        say(format!(
            "  - {}({}) -> {}{how}",
            c.name,
            c.arguments,
            c.outcome.as_str()
        ));
        for k in &c.coercions {
            say(format!(
                "    corrected {}: {} -> {}",
                k.pointer, k.from, k.to
            ));
        }
    }
    say(format!(
        "  stopped: {} after {} turn(s), {} repair turn(s), {} tokens",
        outcome.stop.code(),
        outcome.turns,
        outcome.repair_turns,
        outcome.usage.total()
    ));
}

/// What to tell the user when the provider cannot run; `None` for other failures.
fn advice(e: &ProviderError, host: &str, model: &str) -> String {
    match e {
        ProviderError::Unreachable { .. } => format!(
            "Ollama is not answering at {host}.\n\
             Install Ollama, start it with `ollama serve`, fetch the model with `ollama pull {model}`,\n\
             then run `cargo run --example toy` again (set OLLAMA_HOST if it listens elsewhere)."
        ),
        ProviderError::ModelNotFound { .. } => format!(
            "Ollama at {host} does not have the model `{model}`.\n\
             Run `ollama pull {model}`, then `cargo run --example toy` again\n\
             (or choose an installed model with KBERG_MODEL=...)."
        ),
        other => format!("The model could not answer: {other}"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let model = std::env::var("KBERG_MODEL").unwrap_or_else(|_| "qwen2.5".into());
    let host = std::env::var("OLLAMA_HOST").unwrap_or_else(|_| "http://127.0.0.1:11434".into());
    let request: Vec<String> = std::env::args().skip(1).collect();

    // The app: its tools, served over MCP on loopback. The model's principal holds
    // `notes.write` and sees the Compact surface (small-model-safe tools only).
    let notes: Notes = Arc::default();
    let tools = match notes_app(&notes) {
        Ok(t) => t,
        Err(e) => {
            say(format!("the toy app is misconfigured: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let principal = Principal::new("toy-model")
        .with_grants(Grants::of(["notes.write"]))
        .with_projection(SurfaceProjection::Compact);
    let app = McpApp::builder("toy-notes", "0.1.0").tools(tools).build();
    let config = HttpConfig::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .auth(OpenAccess::as_principal(principal));
    let server = match HttpServer::bind(app, config).await {
        Ok(s) => s,
        Err(e) => {
            say(format!("could not serve the app on loopback: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = CancellationToken::new();
    let s = stop.clone();
    let serving = tokio::spawn(server.run(async move { s.cancelled().await }));
    say(format!("serving the notes app over MCP at {url}"));

    let code = drive(&url, &host, &model, request).await;
    stop.cancel();
    let _ = serving.await;
    code
}

async fn drive(url: &str, host: &str, model: &str, request: Vec<String>) -> ExitCode {
    let surface = match McpSurface::connect_http(url).await {
        Ok(s) => s,
        Err(e) => {
            say(format!("could not connect to the app: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let provider = OllamaProvider::new(OllamaConfig::new(model).base_url(host));
    let host = provider.config().base_url.clone();
    let agent = Agent::new(provider, surface).with_config(
        AgentConfig::default().stream(true).system_prompt(
            "You manage the user's notes with the tools you are given. Use a tool for every action the user asks for. When a tool refuses, tell the user why in one sentence.",
        ),
    );
    let requests = if request.is_empty() {
        vec![
            "Add a note saying \"buy milk\", then list my notes.".to_string(),
            "Now delete all my notes.".to_string(),
        ]
    } else {
        vec![request.join(" ")]
    };
    say(format!("driving it with {model} on Ollama at {host}"));
    let mut conversation: Vec<Message> = Vec::new();
    for text in requests {
        say(format!("\nuser: {text}"));
        conversation.push(Message::user(text));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let printer = tokio::spawn(async move {
            let mut out = std::io::stdout();
            let mut started = false;
            while let Some(ev) = rx.recv().await {
                match ev {
                    AgentEvent::TextDelta { text } => {
                        if !started {
                            let _ = write!(out, "model: ");
                            started = true;
                        }
                        let _ = write!(out, "{text}");
                        let _ = out.flush();
                    }
                    AgentEvent::ToolCalled { call, .. } => {
                        if started {
                            let _ = writeln!(out);
                            started = false;
                        }
                        let _ = writeln!(out, "  calling {}({})", call.name, call.arguments);
                    }
                    AgentEvent::ToolProgress {
                        name,
                        progress,
                        total,
                        message,
                        ..
                    } => {
                        let of = total.map(|t| format!("/{t}")).unwrap_or_default();
                        let says = message.map(|m| format!(": {m}")).unwrap_or_default();
                        let _ = writeln!(out, "  {name} at {progress}{of}{says}");
                    }
                    _ => {}
                }
            }
            if started {
                let _ = writeln!(out);
            }
        });
        let outcome = agent
            .run_with_events(conversation, &CancellationToken::new(), tx)
            .await;
        let _ = printer.await;
        if let StopReason::Provider(e) = &outcome.stop {
            say(format!("\n{}", advice(e, &host, model)));
            return ExitCode::FAILURE;
        }
        report(&outcome);
        conversation = outcome.messages;
    }
    ExitCode::SUCCESS
}
