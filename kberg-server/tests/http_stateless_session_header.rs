//! 2026-07-28 requests carrying an `Mcp-Session-Id`: that revision has no sessions, and its
//! transport says a server ignores the header ("An `Mcp-Session-Id` header on a request: ignore
//! it"; GET and DELETE are `405 Method Not Allowed`). So whatever session the header names
//! (another principal's, one that ended, one that never was) decides nothing: the request is
//! served, or refused, exactly as without it, and the session it names is left alone.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn a_2026_request_is_served_whatever_session_its_header_names() {
    let s = start().await;
    let reader = Raw::new(&s.url, Some(READER));
    let writer = Raw::new(&s.url, Some(WRITER));
    let readers = reader.initialize().await;
    let ended = reader.initialize().await;
    assert_eq!(reader.delete(&ended).await.status, 200);
    let writer_with = |sid: String| {
        let writer = writer.clone();
        async move {
            writer
                .post_with(
                    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
                        "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
                        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
                        "io.modelcontextprotocol/clientCapabilities": {}}}})
                    .to_string(),
                    &[
                        ("mcp-protocol-version", PROTO_NEW),
                        ("mcp-method", "tools/list"),
                        ("mcp-session-id", &sid),
                    ],
                )
                .await
        }
    };
    for (which, sid) in [
        ("another principal's", readers.clone()),
        ("an ended", ended.clone()),
        ("an unknown", "no-such-session".to_string()),
    ] {
        let r = writer_with(sid).await;
        assert_eq!(r.status, 200, "{which} session: {}", r.text);
        assert!(
            r.reply(1)["result"]["tools"].is_array(),
            "{which}: {}",
            r.text
        );
        assert!(
            r.header("mcp-session-id").is_none(),
            "{which}: no session id"
        );
    }

    // GET and DELETE are not part of 2026-07-28: 405 whichever session is named.
    for (which, sid) in [
        ("another principal's", readers.as_str()),
        ("an ended", ended.as_str()),
        ("an unknown", "no-such-session"),
    ] {
        for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
            let r = read(
                writer
                    .http
                    .request(method.clone(), &writer.url)
                    .header("authorization", format!("Bearer {WRITER}"))
                    .header("accept", "text/event-stream")
                    .header("mcp-protocol-version", PROTO_NEW)
                    .header("mcp-session-id", sid)
                    .send()
                    .await
                    .expect("sent"),
            )
            .await;
            assert_eq!(r.status, 405, "{method} naming {which} session: {}", r.text);
        }
    }

    // The reader's session was left alone.
    let r = reader
        .call_old(&readers, 2, "echo", json!({"text": "still mine"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "still mine", "{r}");
}
