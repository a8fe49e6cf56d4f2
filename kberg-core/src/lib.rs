//! # kberg-core
//!
//! The transport-free heart of Kberg: the tools, resources and prompts an app exposes to models,
//! and the one gate every tool call passes through. No HTTP and no provider code lives here;
//! `kberg-server` puts these registries on the MCP wire and `kberg-agent` drives them from a
//! model in-process.
//!
//! - [`ToolRegistry`] holds [`Tool`]s (each [`ToolKind::Read`] or
//!   [`ToolKind::Write`]`(`[`WriteCapability`]`)`), [refusals](ToolRegistry::refuse) and the
//!   declared capabilities, and runs the gate: [`ToolRegistry::call`].
//! - [`Principal`] / [`Caller`] say who calls: their [`Grants`] and [`SurfaceProjection`].
//!   Grants belong to the principal, never to a transport session.
//! - [`ResourceRegistry`] holds live objects, templates and subscriptions;
//!   [`PromptRegistry`] holds prompts.
//! - [`GateError`] / [`ErrorCode`] are the stable, model-visible refusals;
//!   [`FieldError`] names each invalid field.
//! - [`AuditSink`] receives an [`AuditEvent`] for every call; [`JsonlAuditSink`] and (feature
//!   `sqlite`) `SqliteAuditSink` write them to disk off the call path.
//!
//! The primitives, each a step of the gate:
//!
//! - [Handles](Handle): opaque, signed ids an app hands out instead of its row keys
//!   ([`HandleCodec`]); handle-typed arguments are resolved before the tool runs.
//! - [Preview / commit](ToolBuilder::previews): a write's first call is a dry run answered with a
//!   single-use commit token bound to tool, arguments and principal.
//! - [`Scope`]: declared scopes ([`ScopeSpec`]), a caller's [`ScopeSet`], the scope argument
//!   filled in and checked by the gate.
//! - [Human confirmation](ConfirmPolicy): calls above an app-defined threshold wait as a
//!   [`ConfirmTicket`] for a person, through the [`TicketDesk`].
//!
//! Beside the gate, [`redact_url`] / [`redact_source`] show a URL without the credentials it
//! may carry, and [`UrlCredentials`] scrubs a request's credentials out of what a service quotes
//! back: the one rule of the model providers, the embedders and example repositories.
//!
//! ```
//! use kberg_core::*;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Search { query: String }
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct AddNote { title: String }
//!
//! # tokio_test_block_on(async {
//! let tools = ToolRegistry::new();
//! let notes_write = WriteCapability::new("notes.write", "Create and edit notes");
//! tools.declare(notes_write.clone())?;
//!
//! tools.register(ToolBuilder::new("search_notes")
//!     .description("Find notes by text")
//!     .small_model_safe()
//!     .handler(|a: Search, _ctx| async move { Ok(ToolOutput::text(format!("no notes match {}", a.query))) }))?;
//! tools.register(ToolBuilder::new("add_note")
//!     .description("Create a note")
//!     .write(notes_write)
//!     .handler(|a: AddNote, _ctx| async move { Ok(ToolOutput::text(format!("created {}", a.title))) }))?;
//!
//! // A caller without the capability may read but not write.
//! let reader = Caller::new(Principal::new("reader"));
//! let out = tools.call(&reader, "search_notes", json!({"query": "rust"}), CallOptions::default()).await?;
//! assert_eq!(out.all_text(), "no notes match rust");
//! let err = tools.call(&reader, "add_note", json!({"title": "x"}), CallOptions::default()).await.unwrap_err();
//! assert_eq!(err.code(), ErrorCode::CapabilityRequired);
//!
//! // Granted, the write runs.
//! let writer = Caller::new(Principal::new("writer").with_grants(Grants::of(["notes.write"])));
//! let out = tools.call(&writer, "add_note", json!({"title": "hello"}), CallOptions::default()).await?;
//! assert_eq!(out.all_text(), "created hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

// The modules, bottom layer first, one group per layer (ARCHITECTURE.md names the layers; a
// module imports only modules of lower layers, which `tests/layers.rs` checks).
mod content;
mod digest;
mod handle;
mod on_drop;
mod origin;
mod pagination;
mod rate;
mod text;
mod validate;

mod error;
mod preview;
mod redact;

mod audit;
mod capability;
mod resource;
mod scope;

mod audit_log;
mod principal;

mod context;

mod tool;

mod confirm;
mod prompt;

mod catalog;
#[cfg(feature = "sqlite")]
mod ticket_sqlite;

mod gate;

mod registry;

mod task;

pub use audit::{AuditEvent, AuditOutcome, AuditSink, MemoryAuditSink, TracingAuditSink};
#[cfg(feature = "sqlite")]
pub use audit_log::SqliteAuditSink;
pub use audit_log::{AuditLogError, FlushPolicy, JsonlAuditSink, Overflow};
pub use capability::{CapabilityCatalog, Grants, WriteCapability};
pub use catalog::ToolVisibility;
pub use confirm::{
    ConfirmConfig, ConfirmPolicy, ConfirmRequest, ConfirmTicket, MemoryTicketStore, StoreError,
    TicketDesk, TicketError, TicketOutcome, TicketStatus, TicketStore, mark_interrupted,
};
pub use content::{
    Annotations, Content, Icon, IconTheme, ResourceBody, ResourceContents, Role, ToolOutput,
    output_from_json, output_to_json,
};
pub use context::{CallOptions, ClientPeer, PeerError, ToolContext};
pub use digest::{REDACTED, argument_digest, canonical_json, redact};
pub use error::{CoreError, ErrorCode, GateError};
pub use gate::Refusal;
pub use handle::{
    HANDLE_SCHEMA_KEYWORD, Handle, HandleCodec, HandleError, HandleKind, MAX_INTERNAL_ID_LEN,
};
pub use on_drop::SpawnOnDrop;
pub use origin::{CallOrigin, ClientInfo};
pub use pagination::{InvalidCursor, Page, PagesError, read_pages};
pub use preview::{COMMIT_TOKEN_FIELD, CallPhase, CommitConfig};
pub use principal::{Caller, Principal, SurfaceProjection};
pub use prompt::{
    PromptArgs, PromptArgument, PromptEdit, PromptError, PromptMessage, PromptRegistry,
    PromptResult, PromptSpec,
};
pub use rate::{
    LOG_MESSAGE_BURST, LOG_MESSAGE_INTERVAL, PROGRESS_REPORT_BURST, PROGRESS_REPORT_INTERVAL,
    RateBudget,
};
pub use redact::{UrlCredentials, redact_source, redact_url};
pub use registry::{ToolEdit, ToolRegistry, ToolRegistryBuilder};
pub use resource::{
    ResourceDescriptor, ResourceEdit, ResourceError, ResourceEvent, ResourceReader,
    ResourceRegistry, ResourceTemplate, ResourceVisibility, Subscriber, TemplateVars, reader_fn,
};
pub use scope::{SCOPE_SCHEMA_KEYWORD, Scope, ScopeSet, ScopeSpec};
pub use task::{Started, TaskConfig, TaskError, TaskOutcome, TaskSnapshot, TaskStatus, TaskStore};
pub use text::{char_floor, counted, cut_chars, escaped_when_quoted, quote_escaped, quoted};
#[cfg(feature = "sqlite")]
pub use ticket_sqlite::SqliteTicketStore;
pub use tool::{
    AsyncHandler, FnTool, SyncHandler, TaskSupport, Tool, ToolBuilder, ToolError, ToolFuture,
    ToolHints, ToolKind, ToolSpec, check_name, quoted_name, schema_of,
};
pub use validate::{
    CompiledSchema, FieldError, MAX_DIAGNOSED_VALUES, MAX_FIELD_ERRORS, MAX_PATTERN_BACKTRACKS,
    describe_value,
};

/// Re-exported so apps and transports name the same token type.
pub use tokio_util::sync::CancellationToken;
