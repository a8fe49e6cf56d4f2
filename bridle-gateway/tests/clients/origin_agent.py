"""An agent that names itself, driven by the official MCP Python SDK: the client side of
bridle-gateway/tests/admin_call_origin.rs.

    python origin_agent.py URL TOKEN ERA NAME VERSION
        ERA is `handshake` (2025-11-25: initialize, Mcp-Session-Id) or `modern` (2026-07-28:
        server/discover, clientInfo in every request's _meta). Calls `get_rules` on project
        `demo`, then the unknown tool `no_such_tool` (refused by the gate), and prints
        `SESSION <id or ->` and `DONE`.

Exit status 0 means every check held; otherwise the failing check is on stderr.
"""

import sys

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def check(cond, what):
    if not cond:
        print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


async def main(url, token, era, name, version):
    seen = {}

    async def remember_session(response):
        sid = response.headers.get("mcp-session-id")
        if sid:
            seen["session"] = sid

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    http.event_hooks = {"request": [], "response": [remember_session]}
    info = types.Implementation(name=name, version=version)
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, client_info=info) as session:
                if era == "handshake":
                    await session.initialize()
                else:
                    await session.discover()
                result = await session.call_tool("get_rules", {"project": "demo"})
                check(not result.is_error, "get_rules works")
                try:
                    refused = await session.call_tool("no_such_tool", {})
                    check(refused.is_error, "an unknown tool is refused")
                except Exception:
                    pass  # -32602 for an unknown tool: the gate saw it all the same
                print(f"SESSION {seen.get('session', '-')}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:6])
