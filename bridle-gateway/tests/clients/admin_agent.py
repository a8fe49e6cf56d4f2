"""An agent's side of the admin review flow, driven by the official MCP Python SDK.

Run by bridle-gateway/tests/admin_e2e.rs against a gateway with its admin API:

    python admin_agent.py URL TOKEN PROJECT GUARDRAIL_ID
        Subscribes to its rules resource, proposes the guardrail, prints `PROPOSED <id>`,
        waits for the resource-updated notification an admin's approval causes, re-reads the
        resource and prints `RESULT <json>`.

Exit status 0 means every check held; otherwise the failing check is on stderr.
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def check(cond, what):
    if not cond:
        print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def structured(result):
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None) or {}


async def main(url, token, project, guardrail):
    updated = anyio.Event()
    uri = f"bridle://rules/{project}/claude"

    async def on_message(message):
        if isinstance(message, Exception):
            return
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/resources/updated":
            if str(inner.params.uri) == uri:
                updated.set()

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                before = await session.read_resource(uri)
                check(guardrail not in before.contents[0].text, "not policy yet")
                await session.subscribe_resource(uri)
                proposed = await session.call_tool(
                    "propose_guardrail",
                    {
                        "project": project,
                        "id": guardrail,
                        "statement": "Run the test suite before every commit.",
                        "severity": "hard-instruction",
                        "session": "py-admin-e2e",
                    },
                )
                check(not proposed.is_error, f"propose works: {text_of(proposed)}")
                proposal = structured(proposed)["proposal"]
                print(f"PROPOSED {proposal}", flush=True)
                with anyio.fail_after(60):
                    await updated.wait()
                after = await session.read_resource(uri)
                rendered = after.contents[0].text
                print("RESULT " + json.dumps({
                    "proposal": proposal,
                    "shows_guardrail": guardrail in rendered,
                }), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
