"""A coding agent's side of pattern-example search, driven by the official MCP Python SDK.

Run by bridle-memory/tests/mcp_python.rs with the pinned SDK (PyPI `mcp==2.3.0`, installed into
.tools/venv by scripts/install-tools.sh):

    python pattern_client.py URL TOKEN QUERIES_JSON

Lists the tools, calls `search_pattern_examples` once per query (a JSON list of
`[query, arch_tag_or_null]`), calls `refresh_pattern_example` for tag `example` with a progress
callback, and prints one line `RESULT <json>`:
`{"tools": [...], "searches": [[file, ...], ...], "refresh": {...}, "progress": [...],
"unknown_tag": {...}}`. Exit status 0 unless the protocol itself failed.
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def structured(result):
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None) or {}


async def main(url, token, queries):
    out = {"searches": [], "progress": []}
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                out["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
                for query, arch, *mode in queries:
                    args = {"query": query, "k": 3}
                    if arch is not None:
                        args["arch_tag"] = arch
                    if mode:
                        args["mode"] = mode[0]
                    r = await session.call_tool("search_pattern_examples", args)
                    hits = structured(r).get("results", [])
                    out["searches"].append(
                        {
                            "is_error": r.is_error,
                            "files": [h["file_path"] for h in hits],
                            "first": hits[0] if hits else None,
                        }
                    )

                async def on_progress(progress, total, message):
                    out["progress"].append([progress, total, message])

                r = await session.call_tool(
                    "refresh_pattern_example", {"reference_tag": "example"}, progress_callback=on_progress
                )
                out["refresh"] = {"is_error": r.is_error, "structured": structured(r)}
                r = await session.call_tool("refresh_pattern_example", {"reference_tag": "no-such-tag"})
                out["unknown_tag"] = {"is_error": r.is_error, "structured": structured(r)}
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
