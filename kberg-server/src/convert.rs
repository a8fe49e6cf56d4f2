//! Translation between kberg-core's transport-free types and rmcp's wire types.
//!
//! kberg-core's content types (`Content`, `ToolOutput`, `ResourceContents`) serialize to MCP's
//! JSON shape through their one serde derive; everything else about the wire (tool
//! descriptions, listings, prompt messages, refusals) is mapped here and nowhere else. Hot paths
//! (a tool's text result) build rmcp values directly; colder ones go through the documented
//! JSON shape, which keeps this module short and independent of rmcp's constructor churn. A conversion that fails is an internal
//! error of this crate, never a panic. JSON-built results say `resultType: complete` (required
//! by 2026-07-28); rmcp strips it again for older peers.

use std::sync::Arc;

use kberg_core::{
    Content, Icon, PromptMessage, PromptResult, PromptSpec, Refusal, ResourceContents,
    ResourceDescriptor, ResourceTemplate, Role, ToolKind, ToolOutput, ToolSpec,
};
use rmcp::ErrorData as McpError;
use rmcp::model::{self as m, CallToolResult, ContentBlock, JsonObject};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// Decodes a documented JSON shape into an rmcp type.
pub(crate) fn from_json<T: DeserializeOwned>(what: &str, v: Value) -> Result<T, McpError> {
    serde_json::from_value(v).map_err(|e| {
        tracing::error!(what, error = %e, "could not build a wire value");
        McpError::internal_error(format!("could not encode {what}: {e}"), None)
    })
}

/// The `_meta` key that names a Write tool's capability in a listing.
pub(crate) const CAPABILITY_META: &str = "kberg/capability";

/// The rmcp tool description of a spec.
pub(crate) fn tool(spec: &ToolSpec) -> m::Tool {
    let input: JsonObject = match &spec.input_schema {
        Value::Object(o) => o.clone(),
        // A raw tool with no schema accepts any object.
        _ => {
            let mut o = Map::new();
            o.insert("type".into(), Value::String("object".into()));
            o
        }
    };
    let mut t = m::Tool::new_with_raw(
        spec.name.clone(),
        if spec.description.is_empty() {
            None
        } else {
            Some(spec.description.clone().into())
        },
        Arc::new(input),
    );
    t.title = spec.title.clone();
    if let Some(Value::Object(o)) = &spec.output_schema {
        t.output_schema = Some(Arc::new(o.clone()));
    }
    let h = spec.hints();
    let mut a = m::ToolAnnotations::new();
    a.read_only_hint = h.read_only_hint;
    a.destructive_hint = h.destructive_hint;
    a.idempotent_hint = h.idempotent_hint;
    a.open_world_hint = h.open_world_hint;
    t.annotations = Some(a);
    // The app's own keys (an extension's, such as MCP Apps' `ui`), and Kberg's capability of
    // a Write tool, which no app key replaces.
    let mut meta = spec.meta.clone();
    if let ToolKind::Write(cap) = &spec.kind {
        meta.insert(CAPABILITY_META.into(), Value::String(cap.id().to_string()));
    }
    if !meta.is_empty() {
        t.meta = Some(m::MetaObject(meta));
    }
    if !spec.icons.is_empty() {
        t.icons = Some(spec.icons.iter().filter_map(icon).collect());
    }
    t
}

/// An icon in rmcp's type, through MCP's JSON shape (kberg-core's derive); an icon rmcp
/// cannot hold (a theme it does not know) is left out.
fn icon(i: &Icon) -> Option<m::Icon> {
    serde_json::to_value(i)
        .and_then(serde_json::from_value)
        .ok()
}

/// Icons in their JSON shape, as a listing entry's `icons` (none: no field).
fn with_icons(v: &mut Value, icons: &[Icon]) {
    if !icons.is_empty() {
        v["icons"] = serde_json::to_value(icons).unwrap_or(Value::Null);
    }
}

/// A content block in its MCP JSON shape: kberg-core's one serde codec for content.
fn content_json(c: &Content) -> Result<Value, McpError> {
    serde_json::to_value(c).map_err(|e| {
        tracing::error!(error = %e, "a content block did not serialize");
        McpError::internal_error(format!("could not encode a content block: {e}"), None)
    })
}

fn content_block(c: Content) -> Result<ContentBlock, McpError> {
    match c {
        Content::Text(t) => Ok(ContentBlock::text(t)),
        other => from_json("a content block", content_json(&other)?),
    }
}

/// The `tools/call` result of a tool's output.
pub(crate) fn call_result(out: ToolOutput) -> Result<CallToolResult, McpError> {
    let content = out
        .content
        .into_iter()
        .map(content_block)
        .collect::<Result<Vec<_>, _>>()?;
    let mut r = if out.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    r.structured_content = out.structured;
    r.meta = out.meta.map(|m| m::MetaObject(*m));
    Ok(r)
}

/// The `tools/call` result of a refusal (the gate's, this crate's, the aggregator's all have
/// this one shape): the error flag, the sentence as text, and the details (with the stable
/// `code`) as structured content.
pub(crate) fn refusal_result(r: &Refusal) -> CallToolResult {
    let mut out = CallToolResult::error(vec![ContentBlock::text(r.message().to_string())]);
    out.structured_content = Some(r.details());
    out
}

fn resource_contents_json(r: &ResourceContents) -> Value {
    // kberg-core's derive gives MCP's shape (`uri`, `mimeType`, `text` or base64 `blob`); it
    // cannot fail for strings and bytes.
    serde_json::to_value(r).unwrap_or(Value::Null)
}

fn descriptor_json(d: &ResourceDescriptor) -> Value {
    let mut v = json!({"uri": d.uri, "name": d.name});
    if let Some(t) = &d.title {
        v["title"] = json!(t);
    }
    if let Some(x) = &d.description {
        v["description"] = json!(x);
    }
    if let Some(x) = &d.mime_type {
        v["mimeType"] = json!(x);
    }
    if let Some(x) = d.size {
        v["size"] = json!(x);
    }
    if !d.meta.is_empty() {
        v["_meta"] = Value::Object(d.meta.clone());
    }
    with_icons(&mut v, &d.icons);
    v
}

fn template_json(t: &ResourceTemplate) -> Value {
    let mut v = json!({"uriTemplate": t.uri_template, "name": t.name});
    if let Some(x) = &t.title {
        v["title"] = json!(x);
    }
    if let Some(x) = &t.description {
        v["description"] = json!(x);
    }
    if let Some(x) = &t.mime_type {
        v["mimeType"] = json!(x);
    }
    if !t.meta.is_empty() {
        v["_meta"] = Value::Object(t.meta.clone());
    }
    with_icons(&mut v, &t.icons);
    v
}

fn with_cursor(mut v: Value, next: Option<String>) -> Value {
    if let Some(c) = next {
        v["nextCursor"] = json!(c);
    }
    v
}

/// `resources/list` result.
pub(crate) fn list_resources(
    items: &[ResourceDescriptor],
    next: Option<String>,
) -> Result<m::ListResourcesResult, McpError> {
    let v = json!({"resultType": "complete", "resources": items.iter().map(descriptor_json).collect::<Vec<_>>()});
    from_json("a resource list", with_cursor(v, next))
}

/// `resources/templates/list` result.
pub(crate) fn list_templates(
    items: &[ResourceTemplate],
    next: Option<String>,
) -> Result<m::ListResourceTemplatesResult, McpError> {
    let v = json!({"resultType": "complete", "resourceTemplates": items.iter().map(template_json).collect::<Vec<_>>()});
    from_json("a template list", with_cursor(v, next))
}

/// `resources/read` result.
pub(crate) fn read_result(
    contents: &[ResourceContents],
) -> Result<m::ReadResourceResult, McpError> {
    let v = json!({"resultType": "complete", "contents": contents.iter().map(resource_contents_json).collect::<Vec<_>>()});
    from_json("resource contents", v)
}

fn prompt_json(p: &PromptSpec) -> Value {
    let mut v = json!({"name": p.name});
    if let Some(t) = &p.title {
        v["title"] = json!(t);
    }
    if let Some(d) = &p.description {
        v["description"] = json!(d);
    }
    if !p.arguments.is_empty() {
        v["arguments"] = Value::Array(
            p.arguments
                .iter()
                .map(|a| {
                    let mut x = json!({"name": a.name, "required": a.required});
                    if let Some(t) = &a.title {
                        x["title"] = json!(t);
                    }
                    if let Some(d) = &a.description {
                        x["description"] = json!(d);
                    }
                    x
                })
                .collect(),
        );
    }
    with_icons(&mut v, &p.icons);
    v
}

/// `prompts/list` result.
pub(crate) fn list_prompts(
    items: &[PromptSpec],
    next: Option<String>,
) -> Result<m::ListPromptsResult, McpError> {
    let v = json!({"resultType": "complete", "prompts": items.iter().map(prompt_json).collect::<Vec<_>>()});
    from_json("a prompt list", with_cursor(v, next))
}

fn message_json(msg: &PromptMessage) -> Result<Value, McpError> {
    let role = match msg.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    Ok(json!({"role": role, "content": content_json(&msg.content)?}))
}

/// `prompts/get` result.
pub(crate) fn prompt_result(r: &PromptResult) -> Result<m::GetPromptResult, McpError> {
    let messages = r
        .messages
        .iter()
        .map(message_json)
        .collect::<Result<Vec<_>, _>>()?;
    let mut v = json!({"resultType": "complete", "messages": messages});
    if let Some(d) = &r.description {
        v["description"] = json!(d);
    }
    from_json("prompt messages", v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kberg_core::{GateError, ToolBuilder, WriteCapability};

    #[test]
    fn every_content_kind_converts() {
        let out = ToolOutput::contents(vec![
            Content::text("hi"),
            Content::Image {
                data: vec![1, 2, 3],
                mime_type: "image/png".into(),
            },
            Content::Audio {
                data: vec![4],
                mime_type: "audio/wav".into(),
            },
            Content::ResourceLink {
                uri: "notes://1".into(),
                name: "one".into(),
                title: None,
                description: Some("first".into()),
                mime_type: None,
                size: None,
                icons: vec![],
            },
            Content::Resource(ResourceContents::blob(
                "notes://2",
                Some("application/octet-stream"),
                vec![0xff],
            )),
        ]);
        let r = call_result(out).expect("converts");
        let v = serde_json::to_value(&r).expect("serializes");
        assert_eq!(v["content"][0]["text"], "hi");
        assert_eq!(v["content"][1]["data"], "AQID");
        assert_eq!(v["content"][2]["type"], "audio");
        assert_eq!(v["content"][3]["uri"], "notes://1");
        assert_eq!(v["content"][4]["resource"]["blob"], "/w==");
        assert_ne!(v["isError"], true);
    }

    #[test]
    fn tools_carry_hints_and_capability() {
        let cap = WriteCapability::new("notes.write", "write notes");
        let spec = ToolBuilder::new("add")
            .description("adds")
            .write(cap)
            .raw_handler(Value::Null, |_a, _c| async { Ok(ToolOutput::default()) });
        let t = tool(&kberg_core::Tool::spec(&spec));
        let v = serde_json::to_value(&t).expect("serializes");
        assert_eq!(v["inputSchema"]["type"], "object");
        assert_eq!(v["annotations"]["readOnlyHint"], false);
        assert_eq!(v["_meta"]["kberg/capability"], "notes.write");
    }

    #[test]
    fn refusals_carry_the_code() {
        let e = GateError::CapabilityRequired {
            tool: "add".into(),
            capability: "notes.write".into(),
        };
        let v = serde_json::to_value(refusal_result(&e.refusal())).expect("serializes");
        assert_eq!(v["isError"], true);
        assert_eq!(v["structuredContent"]["code"], "capability_required");
        assert!(
            v["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("notes.write"))
        );
    }
}
