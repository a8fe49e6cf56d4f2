"""Bridle's memory tools from an agent's side, driven by the official MCP Python SDK.

Run by examples/tests/bridle_memory_flow.rs against a running `bridle serve` with memory on:

    python bridle_memory_client.py URL READER_TOKEN WRITER_TOKEN PROJECT QUERIES_JSON

READER_TOKEN belongs to an agent without memory permissions, WRITER_TOKEN to one with
`memory: {write: true, index: true}`. QUERIES_JSON is a JSON list of search queries. The script
lists the tools, runs `search_pattern_examples` for every query (as the reader: searching is a
read), tries `remember` as the reader (must be refused), remembers a decision as the writer,
recalls it by meaning, refreshes the example as the writer, and prints `RESULT <json>` for the
test to check. Exit status 0 means the calls themselves went through; the test judges the rest.
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def structured(result):
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None) or {}


async def with_session(url, token, body):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


async def refused(session, name, args):
    """A gate refusal may come back as an error result or as a JSON-RPC error."""
    try:
        r = await session.call_tool(name, args)
    except Exception as e:  # noqa: BLE001 - any protocol error is a refusal here
        return {"refused": True, "text": str(e)}
    return {"refused": bool(r.is_error), "text": text_of(r), "structured": structured(r)}


async def run(url, reader, writer, project, queries):
    report = {}

    async def as_reader(session):
        report["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
        report["search"] = {}
        for q in queries:
            r = await session.call_tool("search_pattern_examples", {"query": q, "k": 3})
            if r.is_error:
                report["search"][q] = {"error": text_of(r)}
            else:
                report["search"][q] = [h["file_path"] for h in structured(r).get("results", [])]
        report["remember_as_reader"] = await refused(
            session,
            "remember",
            {"kind": "decision", "text": "readers cannot write this", "project": project},
        )
        report["refresh_as_reader"] = await refused(
            session, "refresh_pattern_example", {"reference_tag": "demo-example"}
        )
        empty = await session.call_tool("search_pattern_examples", {"query": "   "})
        report["empty_query"] = {"is_error": bool(empty.is_error), "structured": structured(empty)}

    async def as_writer(session):
        report["writer_tools"] = sorted(t.name for t in (await session.list_tools()).tools)
        r = await session.call_tool(
            "remember",
            {
                "kind": "decision",
                "text": "We store timestamps in UTC and convert to local time only in the user interface.",
                "project": project,
                "session": "py-memory-1",
                "tags": ["time"],
            },
        )
        report["remember_as_writer"] = {"is_error": bool(r.is_error), "text": text_of(r)}
        r = await session.call_tool(
            "recall", {"query": "which time zone do we save dates in?", "project": project, "k": 3}
        )
        report["recall"] = {
            "is_error": bool(r.is_error),
            "memories": structured(r).get("memories", []),
        }
        r = await session.call_tool("refresh_pattern_example", {"reference_tag": "demo-example"})
        report["refresh_as_writer"] = {"is_error": bool(r.is_error), "structured": structured(r)}

    await with_session(url, reader, as_reader)
    await with_session(url, writer, as_writer)
    print("RESULT " + json.dumps(report), flush=True)


def main():
    url, reader, writer, project, queries = sys.argv[1:6]
    anyio.run(run, url, reader, writer, project, json.loads(queries))


if __name__ == "__main__":
    main()
