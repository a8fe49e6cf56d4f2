"""An agent's side of Bridle's review flow, driven by the official MCP Python SDK.

Run by examples/tests/bridle_review_flow.rs against a running `bridle serve`:

    python bridle_agent.py propose URL TOKEN PROJECT
        Reads the rules, subscribes to its rules resource, proposes a guardrail, tries (and
        fails) to approve it, prints `PROPOSED <id>`, then waits for the resource-updated
        notification a human's approval causes, re-reads the rules and prints
        `RESULT <json>`.

    python bridle_agent.py forbidden URL TOKEN PROJECT [TICKET]
        As an agent that may not propose: every forbidden action must fail with a clear
        error. Prints `RESULT <json>`.

Exit status 0 means every check held; otherwise the failing check is on stderr.
"""

import json
import sys

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

GUARDRAIL_ID = "tests-before-fix"


def check(cond, what):
    if not cond:
        print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def structured(result):
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None) or {}


async def call_refused(session, name, args):
    """Calls a tool that must fail. A gate refusal may come back as an error result or as a
    JSON-RPC error (an exception here); both count. Returns (failed, text, structured)."""
    try:
        r = await session.call_tool(name, args)
    except Exception as e:  # noqa: BLE001 - any protocol error is a refusal here
        return True, str(e), {}
    return r.is_error, text_of(r), structured(r)


async def propose(url, token, project):
    updated = anyio.Event()
    seen = []
    uri = f"bridle://rules/{project}/claude"

    async def on_message(message):
        if isinstance(message, Exception):
            return
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/resources/updated":
            seen.append(str(inner.params.uri))
            if str(inner.params.uri) == uri:
                updated.set()

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                for name in ("get_rules", "propose_guardrail", "request_scope_approval"):
                    check(name in tools, f"tool {name} is offered")

                before = await session.call_tool("get_rules", {"project": project})
                check(not before.is_error, f"get_rules works: {text_of(before)}")
                check(GUARDRAIL_ID not in text_of(before), "the guardrail is not there yet")
                revision_before = structured(before)["revision"]

                resources = {str(r.uri) for r in (await session.list_resources()).resources}
                check(uri in resources, f"{uri} is listed: {resources}")
                await session.subscribe_resource(uri)

                proposed = await session.call_tool(
                    "propose_guardrail",
                    {
                        "project": project,
                        "id": GUARDRAIL_ID,
                        "statement": "Write a failing test that reproduces a bug before fixing it.",
                        "severity": "hard-instruction",
                        "session": "py-session-1",
                    },
                )
                check(not proposed.is_error, f"propose works: {text_of(proposed)}")
                proposal = structured(proposed)["proposal"]

                # The agent cannot approve its own proposal, by any name.
                failed, why, _ = await call_refused(session, "approve_proposal", {"id": proposal})
                check(failed, "approve_proposal is refused")
                check("bridle rules approve" in why, f"the refusal says who approves: {why}")

                # Still not policy.
                pending = await session.call_tool("get_rules", {"project": project})
                check(GUARDRAIL_ID not in text_of(pending), "a pending proposal is not policy")

                # A stale update is refused as a conflict.
                stale = await session.call_tool(
                    "update_rules",
                    {"project": project, "base_revision": revision_before - 1, "overview": "stale"},
                )
                check(stale.is_error and "revision_conflict" in json.dumps(structured(stale)), f"stale update refused: {text_of(stale)}")

                ticket = await session.call_tool(
                    "request_scope_approval",
                    {"project": project, "action": "rename the db module", "reason": "it blocks the fix"},
                )
                check(not ticket.is_error, f"scope request works: {text_of(ticket)}")

                print(f"PROPOSED {proposal} TICKET {structured(ticket)['ticket']}", flush=True)

                with anyio.fail_after(60):
                    await updated.wait()

                contents = await session.read_resource(uri)
                rendered = contents.contents[0].text
                check(GUARDRAIL_ID in rendered, "the subscribed resource shows the guardrail")

                after = await session.call_tool("get_rules", {"project": project})
                data = structured(after)
                mine = [g for g in data["guardrails"] if g["id"] == GUARDRAIL_ID]
                check(len(mine) == 1, "get_rules lists the new guardrail")
                print("RESULT " + json.dumps({
                    "proposal": proposal,
                    "revision_before": revision_before,
                    "revision_after": data["revision"],
                    "guardrail": mine[0],
                    "text_mentions_provenance": "proposed by agent claude in session py-session-1" in text_of(after),
                    "notified": seen,
                }), flush=True)


async def forbidden(url, token, project, ticket):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    report = {}
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                ok = await session.call_tool("get_rules", {"project": project})
                check(not ok.is_error, f"reading rules is allowed: {text_of(ok)}")
                check(ok.structured_content["agent"] == "codex", "rendered for the codex agent type")

                failed, why, _ = await call_refused(
                    session,
                    "propose_guardrail",
                    {"project": project, "id": "sneaky", "statement": "Anything goes.", "severity": "guidance"},
                )
                check(failed, "an agent without rules.propose cannot propose")
                report["propose"] = why

                failed, why, _ = await call_refused(session, "approve_proposal", {"id": 1})
                check(failed, "approving is refused")
                report["approve"] = why

                r = await session.call_tool("get_rules", {"project": "elsewhere"})
                check(r.is_error, "a project the agent is not configured for is refused")
                report["other_project"] = structured(r).get("code")

                r = await session.call_tool("get_rules", {"project": project, "agent": "hal9000"})
                check(r.is_error, "an unknown agent type is refused")
                report["unknown_agent"] = structured(r).get("code")

                if ticket is not None:
                    r = await session.call_tool("scope_status", {"ticket": int(ticket)})
                    check(r.is_error, "another agent's scope ticket is not visible")
                    report["other_ticket"] = structured(r).get("code")
    print("RESULT " + json.dumps(report), flush=True)


def main():
    mode, url, token, project = sys.argv[1:5]
    if mode == "propose":
        anyio.run(propose, url, token, project)
    elif mode == "forbidden":
        anyio.run(forbidden, url, token, project, sys.argv[5] if len(sys.argv) > 5 else None)
    else:
        check(False, f"unknown mode {mode}")


if __name__ == "__main__":
    main()
