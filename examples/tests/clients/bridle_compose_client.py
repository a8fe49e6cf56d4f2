"""An agent reaching the Bridle gateway in its container, driven by the official MCP Python SDK.

Run by scripts/compose-test.sh against the stack's published port:

    python bridle_compose_client.py URL TOKEN propose GUARDRAIL_ID
        Lists the tools, reads the demo project's rules, proposes a guardrail; prints
        `PROPOSED <id>`.
    python bridle_compose_client.py URL TOKEN check
        Lists the tools and reads the rules; prints `OK <number of tools>`.
    python bridle_compose_client.py URL BADTOKEN refused
        Connecting with a wrong token must fail; prints `REFUSED`.

Exit status 0 means every check held; otherwise the failing check is on stderr.
"""

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


async def session_run(url, token, action, arg):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                check("get_rules" in tools, f"get_rules is offered: {sorted(tools)}")
                rules = await session.call_tool("get_rules", {"project": "demo"})
                check(not rules.is_error, f"get_rules works: {text_of(rules)}")
                if action == "propose":
                    r = await session.call_tool(
                        "propose_guardrail",
                        {
                            "project": "demo",
                            "id": arg,
                            "statement": "Run the tests before every commit.",
                            "severity": "guidance",
                        },
                    )
                    check(not r.is_error, f"propose_guardrail works: {text_of(r)}")
                    print(f"PROPOSED {arg}", flush=True)
                else:
                    print(f"OK {len(tools)}", flush=True)


async def main():
    url, token, action = sys.argv[1], sys.argv[2], sys.argv[3]
    arg = sys.argv[4] if len(sys.argv) > 4 else ""
    if action == "refused":
        try:
            await session_run(url, token, "check", "")
        except BaseException as e:  # noqa: BLE001 - any failure to connect is the refusal
            if isinstance(e, SystemExit):
                raise
            print("REFUSED", flush=True)
            return
        check(False, "a wrong token was accepted")
    await session_run(url, token, action, arg)


if __name__ == "__main__":
    anyio.run(main)
