//! The fixtures of the official MCP conformance suite, registered through Kberg's public API.
//!
//! `@modelcontextprotocol/conformance` (pinned at 0.2.0-alpha.12) drives a server in server mode
//! and expects tools, resources and prompts with fixed names and fixed answers; each scenario's
//! description (`conformance list --server`, and the scenario text in the package) names them.
//! This module registers every fixture the scored scenarios of both requirement sets
//! (2025-11-25 and 2026-07-28) ask for, plus the diagnostic hooks of `server-stateless`
//! (`test_missing_capability`, `test_logging_tool`, `test_trigger_tool_change`, ...), using only
//! kberg-core registries, `ToolContext` and kberg-server's `input::ask` (named and
//! simultaneous questions): no rmcp type appears here. Whatever the suite
//! checks beyond the fixtures (sessions, `_meta` validation, caching hints, DNS-rebinding
//! protection) is kberg-server's job, which is the point of running it.
//!
//! The tasks-extension fixtures (`greet`, `slow_compute`, ...) are in the module `tasks`.
//!
//! The fixture texts follow the scenario descriptions word for word where the suite compares
//! them.

mod tasks;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use kberg_core::{
    Content, CoreError, PromptArgument, PromptMessage, PromptRegistry, PromptResult, PromptSpec,
    ResourceContents, ResourceDescriptor, ResourceError, ResourceRegistry, ResourceTemplate, Role,
    ToolBuilder, ToolContext, ToolError, ToolOutput, ToolRegistry, reader_fn,
};
use kberg_server::McpApp;
use kberg_server::input::{Question, ask};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// A 1x1 red PNG, as the suite's descriptions suggest ("a minimal test image").
pub const TEST_IMAGE_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A minimal WAV file (header and two bytes of silence).
pub const TEST_AUDIO_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The URI of the resource that changes on its own (subscription fixtures).
pub const WATCHED_URI: &str = "test://watched-resource";

/// The tool `test_trigger_tool_change` adds and removes, so the tool list changes.
pub const DYNAMIC_TOOL: &str = "test_dynamic_tool";

/// The prompt `test_trigger_prompt_change` adds and removes.
pub const DYNAMIC_PROMPT: &str = "test_dynamic_prompt";

fn decode(b64: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("the fixture constants are valid base64")
}

fn image() -> Content {
    Content::Image {
        data: decode(TEST_IMAGE_BASE64),
        mime_type: "image/png".into(),
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

async fn pause(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Text of a sampling result (`CreateMessageResult`): its `content.text`, or the first text
/// block when `content` is an array.
fn sampled_text(result: &Value) -> String {
    let content = &result["content"];
    let text = match content {
        Value::Array(blocks) => blocks.iter().find_map(|b| b["text"].as_str()),
        other => other["text"].as_str(),
    };
    text.unwrap_or("(no text in the sampling result)")
        .to_string()
}

/// `action=..., content={...}` of an elicitation result.
fn elicited(result: &Value) -> String {
    let action = result["action"].as_str().unwrap_or("unknown");
    let content = result.get("content").cloned().unwrap_or_else(|| json!({}));
    format!("action={action}, content={content}")
}

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the LLM.
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

fn content_tools(tools: &ToolRegistry) -> Result<(), CoreError> {
    tools.register(
        ToolBuilder::new("test_simple_text")
            .description("Tests simple text content response")
            .raw_handler(no_args(), |_a, _c| async {
                Ok(ToolOutput::text(
                    "This is a simple text response for testing.",
                ))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_image_content")
            .description("Tests image content response")
            .raw_handler(no_args(), |_a, _c| async {
                Ok(ToolOutput::contents(vec![image()]))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_audio_content")
            .description("Tests audio content response")
            .raw_handler(no_args(), |_a, _c| async {
                Ok(ToolOutput::contents(vec![Content::Audio {
                    data: decode(TEST_AUDIO_BASE64),
                    mime_type: "audio/wav".into(),
                }]))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_embedded_resource")
            .description("Tests embedded resource content response")
            .raw_handler(no_args(), |_a, _c| async {
                Ok(ToolOutput::contents(vec![Content::Resource(
                    ResourceContents::text(
                        "test://embedded-resource",
                        Some("text/plain"),
                        "This is an embedded resource content.",
                    ),
                )]))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_multiple_content_types")
            .description("Tests response with multiple content types (text, image, resource)")
            .raw_handler(no_args(), |_a, _c| async {
                Ok(ToolOutput::contents(vec![
                    Content::text("Multiple content types test:"),
                    image(),
                    Content::Resource(ResourceContents::text(
                        "test://mixed-content-resource",
                        Some("application/json"),
                        json!({"test": "data", "value": 123}).to_string(),
                    )),
                ]))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_error_handling")
            .description("Tests error response handling")
            .raw_handler(no_args(), |_a, _c| async {
                Err(ToolError::failed(
                    "This tool intentionally returns an error for testing",
                ))
            }),
    )?;
    // A parameter mirrored in an HTTP header (SEP-2243, 2026-07-28): clients send `region` also
    // as `Mcp-Param-Region`, and the server must refuse a header that disagrees with the body.
    tools.register(
        ToolBuilder::new("test_custom_headers")
            .description(
                "Echoes a region that travels in the body and in the Mcp-Param-Region header",
            )
            .raw_handler(
                json!({
                    "type": "object",
                    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
                    "required": ["region"]
                }),
                |args, _c| async move {
                    Ok(ToolOutput::text(format!(
                        "region: {}",
                        args["region"].as_str().unwrap_or_default()
                    )))
                },
            ),
    )?;
    tools.register(
        ToolBuilder::new("json_schema_2020_12_tool")
            .description("Tool with JSON Schema 2020-12 features")
            .raw_handler(json_schema_2020_12(), |args, _c| async move {
                Ok(ToolOutput::text(format!(
                    "JSON Schema 2020-12 tool called with: {args}"
                )))
            }),
    )?;
    Ok(())
}

/// The input schema of `json_schema_2020_12_tool`: `$schema`, `$defs` with an `$anchor`,
/// `allOf`/`anyOf`, `if`/`then`/`else` and `additionalProperties: false`, which a server must
/// list unchanged (SEP-1613, SEP-2106).
pub fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

fn notifying_tools(tools: &ToolRegistry) -> Result<(), CoreError> {
    async fn three_logs(ctx: &ToolContext) -> Result<(), ToolError> {
        ctx.log("info", None, json!("Tool execution started"))
            .await?;
        pause(50).await;
        ctx.log("info", None, json!("Tool processing data")).await?;
        pause(50).await;
        ctx.log("info", None, json!("Tool execution completed"))
            .await?;
        Ok(())
    }
    tools.register(
        ToolBuilder::new("test_tool_with_logging")
            .description("Tests tool that emits log messages during execution")
            .raw_handler(no_args(), |_a, ctx| async move {
                three_logs(&ctx).await?;
                Ok(ToolOutput::text("Tool with logging executed successfully"))
            }),
    )?;
    // The same behaviour under the name the stateless scenario probes: with no
    // `_meta.../logLevel` on the request, none of these messages may reach the client.
    tools.register(
        ToolBuilder::new("test_logging_tool")
            .description("Emits three info log messages (delivered only at a requested log level)")
            .raw_handler(no_args(), |_a, ctx| async move {
                three_logs(&ctx).await?;
                Ok(ToolOutput::text("Logging tool executed successfully"))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_tool_with_progress")
            .description("Tests tool that reports progress notifications")
            .raw_handler(no_args(), |_a, ctx| async move {
                for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        pause(50).await;
                    }
                    let message = format!("Completed step {step} of 100");
                    ctx.progress(step, Some(100.0), Some(&message)).await?;
                }
                Ok(ToolOutput::text("Tool with progress executed successfully"))
            }),
    )?;
    Ok(())
}

fn client_request_tools(tools: &ToolRegistry) -> Result<(), CoreError> {
    tools.register(
        ToolBuilder::new("test_sampling")
            .description("Tests server-initiated sampling (LLM completion request)")
            .handler(|a: SamplingArgs, ctx| async move {
                let result = ctx
                    .sample(json!({
                        "messages": [{"role": "user", "content": {"type": "text", "text": a.prompt}}],
                        "maxTokens": 100
                    }))
                    .await?;
                Ok(ToolOutput::text(format!("LLM response: {}", sampled_text(&result))))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_elicitation")
            .description("Tests server-initiated elicitation (user input request)")
            .handler(|a: ElicitationArgs, ctx| async move {
                let result = ctx
                    .elicit(
                        &a.message,
                        json!({
                            "type": "object",
                            "properties": {
                                "username": {"type": "string", "description": "User's response"},
                                "email": {"type": "string", "description": "User's email address"}
                            },
                            "required": ["username", "email"]
                        }),
                    )
                    .await?;
                Ok(ToolOutput::text(format!(
                    "User response: {}",
                    elicited(&result)
                )))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_elicitation_sep1034_defaults")
            .description("Tests elicitation with default values per SEP-1034")
            .raw_handler(no_args(), |_a, ctx| async move {
                let result = ctx
                    .elicit(
                        "Please review and update the form fields with defaults",
                        json!({
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                                "age": {"type": "integer", "description": "User age", "default": 30},
                                "score": {"type": "number", "description": "User score", "default": 95.5},
                                "status": {
                                    "type": "string",
                                    "description": "User status",
                                    "enum": ["active", "inactive", "pending"],
                                    "default": "active"
                                },
                                "verified": {"type": "boolean", "description": "Verification status", "default": true}
                            },
                            "required": []
                        }),
                    )
                    .await?;
                Ok(ToolOutput::text(format!("Elicitation completed: {}", elicited(&result))))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_elicitation_sep1330_enums")
            .description("Tests elicitation with enum schema improvements per SEP-1330")
            .raw_handler(no_args(), |_a, ctx| async move {
                let result = ctx
                    .elicit(
                        "Please select options from the enum fields",
                        json!({
                            "type": "object",
                            "properties": {
                                "untitledSingle": {
                                    "type": "string",
                                    "description": "Select one option",
                                    "enum": ["option1", "option2", "option3"]
                                },
                                "titledSingle": {
                                    "type": "string",
                                    "description": "Select one option with titles",
                                    "oneOf": [
                                        {"const": "value1", "title": "First Option"},
                                        {"const": "value2", "title": "Second Option"},
                                        {"const": "value3", "title": "Third Option"}
                                    ]
                                },
                                "legacyEnum": {
                                    "type": "string",
                                    "description": "Select one option (legacy)",
                                    "enum": ["opt1", "opt2", "opt3"],
                                    "enumNames": ["Option One", "Option Two", "Option Three"]
                                },
                                "untitledMulti": {
                                    "type": "array",
                                    "description": "Select multiple options",
                                    "minItems": 1,
                                    "maxItems": 3,
                                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
                                },
                                "titledMulti": {
                                    "type": "array",
                                    "description": "Select multiple options with titles",
                                    "minItems": 1,
                                    "maxItems": 3,
                                    "items": {
                                        "anyOf": [
                                            {"const": "value1", "title": "First Choice"},
                                            {"const": "value2", "title": "Second Choice"},
                                            {"const": "value3", "title": "Third Choice"}
                                        ]
                                    }
                                }
                            },
                            "required": []
                        }),
                    )
                    .await?;
                Ok(ToolOutput::text(format!("Elicitation completed: {}", elicited(&result))))
            }),
    )?;
    // Needs sampling, which a stateless client that did not declare it cannot give: the
    // server must answer -32021 (missing required client capability), never run it blind.
    tools.register(
        ToolBuilder::new("test_missing_capability")
            .description("Needs the client's sampling capability")
            .raw_handler(no_args(), |_a, ctx| async move {
                let result = ctx
                    .sample(json!({
                        "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello"}}],
                        "maxTokens": 20
                    }))
                    .await?;
                Ok(ToolOutput::text(format!("LLM response: {}", sampled_text(&result))))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_streaming_elicitation")
            .description("Asks the user a question while the call is in flight")
            .raw_handler(no_args(), |_a, ctx| async move {
                let result = ctx
                    .elicit(
                        "Streaming elicitation: what is your name?",
                        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                    )
                    .await?;
                Ok(ToolOutput::text(format!("Elicitation completed: {}", elicited(&result))))
            }),
    )?;
    Ok(())
}

/// Multi-round-trip fixtures (2026-07-28, SEP-2322). Each asks through `ToolContext`; on the
/// stateless protocol kberg-server turns every question into an `input_required` result and
/// re-runs the tool when the client answers.
fn input_required_tools(tools: &ToolRegistry) -> Result<(), CoreError> {
    fn name_schema(field: &str) -> Value {
        json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]})
    }
    tools.register(
        ToolBuilder::new("test_input_required_result_elicitation")
            .description("Asks the user's name, then greets them")
            .raw_handler(no_args(), |_a, ctx| async move {
                // A named question: the suite answers under the key it was asked with.
                let answers = ask(
                    &ctx,
                    vec![Question::elicit(
                        "user_name",
                        "What is your name?",
                        name_schema("name"),
                    )],
                )
                .await?;
                let name = answers
                    .get("user_name")
                    .and_then(|r| r["content"]["name"].as_str())
                    .unwrap_or("stranger");
                Ok(ToolOutput::text(format!("Hello, {name}!")))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_input_required_result_sampling")
            .description("Asks the client's model a question")
            .raw_handler(no_args(), |_a, ctx| async move {
                let r = ctx
                    .sample(json!({
                        "messages": [{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}],
                        "maxTokens": 100
                    }))
                    .await?;
                Ok(ToolOutput::text(format!("The model said: {}", sampled_text(&r))))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_input_required_result_list_roots")
            .description("Lists the client's roots")
            .raw_handler(no_args(), |_a, ctx| async move {
                let r = ctx.roots().await?;
                let uris: Vec<&str> = r["roots"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x["uri"].as_str()).collect())
                    .unwrap_or_default();
                Ok(ToolOutput::text(format!(
                    "Client roots: {}",
                    uris.join(", ")
                )))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_input_required_result_request_state")
            .description("Asks for a confirmation and checks the round trip's state")
            .raw_handler(no_args(), |_a, ctx| async move {
                let r = ctx
                    .elicit(
                        "Please confirm",
                        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
                    )
                    .await?;
                let ok = r["content"]["ok"].as_bool().unwrap_or(false);
                Ok(ToolOutput::text(format!("state-ok: confirmed={ok}")))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_input_required_result_multiple_inputs")
            .description("Asks for a name, a greeting from the model and the client's roots")
            .raw_handler(no_args(), |_a, ctx| async move {
                // Three questions at once: one round trip on 2026-07-28.
                let answers = ask(
                    &ctx,
                    vec![
                        Question::elicit("user_name", "What is your name?", name_schema("name")),
                        Question::sample(
                            "greeting",
                            json!({
                                "messages": [{"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}],
                                "maxTokens": 50
                            }),
                        ),
                        Question::roots("client_roots"),
                    ],
                )
                .await?;
                let name = answers
                    .get("user_name")
                    .and_then(|r| r["content"]["name"].as_str())
                    .unwrap_or("stranger");
                let greeting = answers.get("greeting").map(sampled_text).unwrap_or_default();
                let count = answers
                    .get("client_roots")
                    .and_then(|r| r["roots"].as_array())
                    .map_or(0, Vec::len);
                Ok(ToolOutput::text(format!("{greeting} {name}; {count} root(s)")))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_input_required_result_multi_round")
            .description("Asks two questions, one round each")
            .raw_handler(no_args(), |_a, ctx| async move {
                let name = ctx
                    .elicit("Step 1: What is your name?", name_schema("name"))
                    .await?;
                let color = ctx
                    .elicit("Step 2: What is your favorite color?", name_schema("color"))
                    .await?;
                Ok(ToolOutput::text(format!(
                    "{} likes {}",
                    name["content"]["name"].as_str().unwrap_or("someone"),
                    color["content"]["color"].as_str().unwrap_or("no color"),
                )))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_input_required_result_tampered_state")
            .description("Asks for a confirmation; the round trip's state must come back intact")
            .raw_handler(no_args(), |_a, ctx| async move {
                let r = ctx
                    .elicit(
                        "Please confirm",
                        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
                    )
                    .await?;
                Ok(ToolOutput::text(format!("confirmed: {}", elicited(&r))))
            }),
    )?;
    // Only asks what the client declared it can answer.
    tools.register(
        ToolBuilder::new("test_input_required_result_capabilities")
            .description("Asks the user if the client can, and the model in any case")
            .raw_handler(no_args(), |_a, ctx| async move {
                let can_elicit = ctx.peer().is_some_and(|p| p.supports("elicitation"));
                let answer = if can_elicit {
                    elicited(&ctx.elicit("What is your name?", name_schema("name")).await?)
                } else {
                    String::from("(no elicitation)")
                };
                let r = ctx
                    .sample(json!({
                        "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello"}}],
                        "maxTokens": 20
                    }))
                    .await?;
                Ok(ToolOutput::text(format!("{answer}; model: {}", sampled_text(&r))))
            }),
    )?;
    Ok(())
}

/// Hooks that change the registries, so list-changed notifications can be observed.
fn trigger_tools(tools: &ToolRegistry, prompts: &PromptRegistry) -> Result<(), CoreError> {
    let registry = tools.clone();
    tools.register(
        ToolBuilder::new("test_trigger_tool_change")
            .description("Adds or removes `test_dynamic_tool`, so the tool list changes")
            .raw_handler(no_args(), move |_a, _c| {
                let registry = registry.clone();
                async move {
                    let now = if registry.remove(DYNAMIC_TOOL) {
                        "removed"
                    } else {
                        registry
                            .register(dynamic_tool())
                            .map_err(|e| ToolError::failed(e.to_string()))?;
                        "added"
                    };
                    Ok(ToolOutput::text(format!("{DYNAMIC_TOOL} {now}")))
                }
            }),
    )?;
    let registry = prompts.clone();
    tools.register(
        ToolBuilder::new("test_trigger_prompt_change")
            .description("Adds or removes `test_dynamic_prompt`, so the prompt list changes")
            .raw_handler(no_args(), move |_a, _c| {
                let registry = registry.clone();
                async move {
                    let now = if registry.remove(DYNAMIC_PROMPT) {
                        "removed"
                    } else {
                        registry
                            .register(
                                PromptSpec::new(DYNAMIC_PROMPT, "A prompt that comes and goes"),
                                |_args| async {
                                    Ok(PromptResult {
                                        description: None,
                                        messages: vec![PromptMessage::user("I come and go.")],
                                    })
                                },
                            )
                            .map_err(|e| ToolError::failed(e.to_string()))?;
                        "added"
                    };
                    Ok(ToolOutput::text(format!("{DYNAMIC_PROMPT} {now}")))
                }
            }),
    )?;
    Ok(())
}

fn dynamic_tool() -> kberg_core::FnTool {
    ToolBuilder::new(DYNAMIC_TOOL)
        .description("A tool that comes and goes")
        .raw_handler(no_args(), |_a, _c| async {
            Ok(ToolOutput::text("I come and go."))
        })
}

/// The static, binary, template and watched resources. Returns the watched resource's change
/// counter.
fn resources(resources: &ResourceRegistry) -> Result<Arc<AtomicU64>, CoreError> {
    resources.register_text(
        ResourceDescriptor::new("test://static-text", "static-text")
            .title("Static Text Resource")
            .description("A static text resource for testing")
            .mime_type("text/plain"),
        "This is the content of the static text resource.",
    )?;
    resources.register(
        ResourceDescriptor::new("test://static-binary", "static-binary")
            .title("Static Binary Resource")
            .description("A static binary resource (image) for testing")
            .mime_type("image/png"),
        reader_fn(|uri, _vars| async move {
            Ok(vec![ResourceContents::blob(
                uri,
                Some("image/png"),
                decode(TEST_IMAGE_BASE64),
            )])
        }),
    )?;
    resources.register_template(
        ResourceTemplate::new("test://template/{id}/data", "template")
            .description("A resource template with parameter substitution")
            .mime_type("application/json"),
        reader_fn(|uri, vars| async move {
            let id = vars
                .get("id")
                .cloned()
                .ok_or_else(|| ResourceError::NotFound { uri: uri.clone() })?;
            let body =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            Ok(vec![ResourceContents::text(
                uri,
                Some("application/json"),
                body.to_string(),
            )])
        }),
    )?;
    let version = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&version);
    resources.register(
        ResourceDescriptor::new(WATCHED_URI, "watched-resource")
            .title("Watched Resource")
            .description("A resource that changes every few seconds")
            .mime_type("text/plain"),
        reader_fn(move |uri, _vars| {
            let v = seen.load(Ordering::Relaxed);
            async move {
                Ok(vec![ResourceContents::text(
                    uri,
                    Some("text/plain"),
                    format!("Watched resource content, version {v}"),
                )])
            }
        }),
    )?;
    Ok(version)
}

fn prompts(prompts: &PromptRegistry) -> Result<(), CoreError> {
    prompts.register(
        PromptSpec::new("test_simple_prompt", "A simple prompt without arguments")
            .title("Simple Test Prompt"),
        |_args| async {
            Ok(PromptResult {
                description: None,
                messages: vec![PromptMessage::user("This is a simple prompt for testing.")],
            })
        },
    )?;
    prompts.register(
        PromptSpec::new(
            "test_prompt_with_arguments",
            "A prompt with required arguments",
        )
        .title("Prompt With Arguments")
        .argument(
            PromptArgument::required("arg1", "First test argument")
                .with_completions(["paris", "park", "party", "test", "testing"]),
        )
        .argument(PromptArgument::required("arg2", "Second test argument")),
        |args| async move {
            let arg1 = args.get("arg1").cloned().unwrap_or_default();
            let arg2 = args.get("arg2").cloned().unwrap_or_default();
            Ok(PromptResult {
                description: None,
                messages: vec![PromptMessage::user(format!(
                    "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
                ))],
            })
        },
    )?;
    prompts.register(
        PromptSpec::new(
            "test_prompt_with_embedded_resource",
            "A prompt that includes an embedded resource",
        )
        .title("Prompt With Embedded Resource")
        .argument(PromptArgument::required(
            "resourceUri",
            "URI of the resource to embed",
        )),
        |args| async move {
            let uri = args.get("resourceUri").cloned().unwrap_or_default();
            Ok(PromptResult {
                description: None,
                messages: vec![
                    PromptMessage {
                        role: Role::User,
                        content: Content::Resource(ResourceContents::text(
                            uri,
                            Some("text/plain"),
                            "Embedded resource content for testing.",
                        )),
                    },
                    PromptMessage::user("Please process the embedded resource above."),
                ],
            })
        },
    )?;
    prompts.register(
        PromptSpec::new(
            "test_prompt_with_image",
            "A prompt that includes image content",
        )
        .title("Prompt With Image"),
        |_args| async {
            Ok(PromptResult {
                description: None,
                messages: vec![
                    PromptMessage {
                        role: Role::User,
                        content: image(),
                    },
                    PromptMessage::user("Please analyze the image above."),
                ],
            })
        },
    )?;
    // input-required-result-non-tool-request: a prompt that asks the user for context while it
    // renders (2026-07-28: an `input_required` result, then the prompt on the retry).
    prompts.register_with_context(
        PromptSpec::new(
            "test_input_required_result_prompt",
            "Asks the user what context to use, then renders a prompt with it",
        ),
        |_args, ctx| async move {
            let answers = ask(
                &ctx,
                vec![Question::elicit(
                    "user_context",
                    "What context should the prompt use?",
                    json!({
                        "type": "object",
                        "properties": {"context": {"type": "string"}},
                        "required": ["context"]
                    }),
                )],
            )
            .await?;
            let answer = answers.get("user_context").unwrap_or(&Value::Null);
            let context = match answer["action"].as_str() {
                Some("accept") => answer["content"]["context"]
                    .as_str()
                    .ok_or("the answer has no `context` string")?,
                _ => "no context",
            };
            Ok(PromptResult {
                description: Some("A prompt rendered with the user's context".into()),
                messages: vec![PromptMessage::user(format!(
                    "Use this context for the task: {context}"
                ))],
            })
        },
    )?;
    Ok(())
}

/// The conformance fixture app, and the counter of its watched resource.
#[derive(Debug, Clone)]
pub struct ConformanceApp {
    /// The app to serve.
    pub app: McpApp,
    /// Incremented by [`ConformanceApp::touch_watched`]; part of the watched resource's text.
    pub watched_version: Arc<AtomicU64>,
}

impl ConformanceApp {
    /// Changes the watched resource and tells its subscribers. Returns how many were told.
    pub fn touch_watched(&self) -> usize {
        self.watched_version.fetch_add(1, Ordering::Relaxed);
        self.app.resources().notify_updated(WATCHED_URI)
    }
}

/// Builds the app with every fixture registered.
pub fn app() -> Result<ConformanceApp, CoreError> {
    let tools = ToolRegistry::new();
    let resource_registry = ResourceRegistry::new();
    let prompt_registry = PromptRegistry::new();
    content_tools(&tools)?;
    notifying_tools(&tools)?;
    client_request_tools(&tools)?;
    input_required_tools(&tools)?;
    trigger_tools(&tools, &prompt_registry)?;
    tasks::tools(&tools)?;
    let watched_version = resources(&resource_registry)?;
    prompts(&prompt_registry)?;
    let app = McpApp::builder("kberg-conformance", env!("CARGO_PKG_VERSION"))
        .title("Kberg conformance fixtures")
        .instructions("Fixtures of the MCP conformance suite, served by Kberg.")
        .tools(tools)
        .resources(resource_registry)
        .prompts(prompt_registry)
        .build();
    Ok(ConformanceApp {
        app,
        watched_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kberg_core::{CallOptions, Caller, Principal};

    #[tokio::test]
    async fn fixtures_answer_without_a_client() {
        let c = app().expect("fixtures register");
        let caller = Caller::new(Principal::new("t"));
        let tools = c.app.tools();
        let out = tools
            .call(
                &caller,
                "test_simple_text",
                json!({}),
                CallOptions::default(),
            )
            .await
            .expect("simple text runs");
        assert_eq!(
            out.all_text(),
            "This is a simple text response for testing."
        );
        let err = tools
            .call(
                &caller,
                "test_error_handling",
                json!({}),
                CallOptions::default(),
            )
            .await
            .expect_err("the error fixture fails");
        assert!(err.to_string().contains("intentionally"), "{err}");
        // Without a client channel a tool that needs sampling cannot run.
        assert!(
            tools
                .call(
                    &caller,
                    "test_sampling",
                    json!({"prompt": "hi"}),
                    CallOptions::default()
                )
                .await
                .is_err()
        );
        let listed: Vec<String> = tools.list(&caller).into_iter().map(|s| s.name).collect();
        assert!(listed.contains(&"json_schema_2020_12_tool".to_string()));
    }

    #[tokio::test]
    async fn trigger_toggles_the_dynamic_tool() {
        let c = app().expect("fixtures register");
        let caller = Caller::new(Principal::new("t"));
        let tools = c.app.tools();
        assert!(tools.spec(DYNAMIC_TOOL).is_none());
        tools
            .call(
                &caller,
                "test_trigger_tool_change",
                json!({}),
                CallOptions::default(),
            )
            .await
            .expect("trigger runs");
        assert!(tools.spec(DYNAMIC_TOOL).is_some());
        tools
            .call(
                &caller,
                "test_trigger_tool_change",
                json!({}),
                CallOptions::default(),
            )
            .await
            .expect("trigger runs");
        assert!(tools.spec(DYNAMIC_TOOL).is_none());
    }

    #[tokio::test]
    async fn resources_and_prompts_read_back() {
        let c = app().expect("fixtures register");
        let r = c
            .app
            .resources()
            .read("test://template/123/data")
            .await
            .expect("template reads");
        assert_eq!(r[0].uri, "test://template/123/data");
        let before = c.app.resources().read(WATCHED_URI).await.expect("reads");
        assert_eq!(c.touch_watched(), 0, "nobody is subscribed yet");
        let after = c.app.resources().read(WATCHED_URI).await.expect("reads");
        assert_ne!(before, after);
        let mut args = kberg_core::PromptArgs::new();
        args.insert("arg1".into(), "hello".into());
        args.insert("arg2".into(), "world".into());
        let p = c
            .app
            .prompts()
            .get("test_prompt_with_arguments", args)
            .await
            .expect("prompt renders");
        assert_eq!(
            p.messages[0].content,
            Content::text("Prompt with arguments: arg1='hello', arg2='world'")
        );
        assert!(
            c.app
                .prompts()
                .get("test_prompt_with_arguments", Default::default())
                .await
                .is_err()
        );
    }
}
