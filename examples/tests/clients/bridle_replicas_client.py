"""An agent of Bridle behind several gateway replicas, driven by the official MCP Python SDK.

Run by examples/tests/bridle_replicas.rs (PyPI `mcp==2.3.0`, pinned in tools/requirements.txt),
always in the SDK's default mode (`server/discover`, so 2026-07-28 where the server speaks it):

    python bridle_replicas_client.py traffic URL TOKEN PROJECT COUNT [PAUSE_AT]
        Lists the tools, then proposes COUNT guardrails (`replica-0` ...) one after the other,
        printing `ACCEPTED <i> <proposal id>` or `FAILED <i> <why>` for each (a failed call is
        not retried: its outcome is unknown), then lists the tools again. With PAUSE_AT, after
        call PAUSE_AT it prints `PAUSED` and waits for a line on stdin before going on.

    python bridle_replicas_client.py legacy-traffic URL TOKEN PROJECT COUNT [PAUSE_AT]
        As `traffic`, on the 2025-11-25 initialize handshake (one `Mcp-Session-Id` for the
        whole run, whichever replica answers); prints `SESSION <id>` after connecting.

    python bridle_replicas_client.py propose URL TOKEN PROJECT GUARDRAIL
        Proposes one guardrail and prints `PROPOSED <proposal id>`.

    python bridle_replicas_client.py listen URL TOKEN PROJECT GUARDRAIL
        Listens (`subscriptions/listen`) to its rules resource, prints `LISTENING`, waits for the
        resource's update, re-reads it and prints `UPDATED <uri> <whether it shows GUARDRAIL>`.

The first line is `connected <protocol version>`; a failed check prints `CHECK FAILED: <why>`
on stderr and exits 1.
"""

import sys

import anyio
import anyio.to_thread
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TIMEOUT_S = 30


def check(cond, what):
    if not cond:
        print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def client(url, token, mode="auto", seen=None):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    if seen is not None:

        async def remember_session(response):
            sid = response.headers.get("mcp-session-id")
            if sid:
                seen["session"] = sid

        http.event_hooks = {"request": [], "response": [remember_session]}
    return Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        read_timeout_seconds=TIMEOUT_S,
    )


def guardrail(project, gid):
    return {
        "project": project,
        "id": gid,
        "statement": f"Guardrail {gid}, proposed through a load balancer.",
        "severity": "guidance",
        "session": "replicas",
    }


async def list_tools(session, what):
    names = {t.name for t in (await session.list_tools()).tools}
    for name in ("get_rules", "propose_guardrail"):
        check(name in names, f"{what}: {name} is offered ({sorted(names)})")
    print(f"ok {what} {len(names)}", flush=True)


async def traffic(url, token, project, count, pause_at, mode="auto"):
    seen = {}
    async with client(url, token, mode, seen) as session:
        print(f"connected {session.protocol_version}", flush=True)
        if mode == "legacy":
            check("session" in seen, "the handshake assigned a session id")
            print(f"SESSION {seen['session']}", flush=True)
        await list_tools(session, "list-tools")
        for i in range(count):
            try:
                r = await session.call_tool("propose_guardrail", guardrail(project, f"replica-{i}"))
            except Exception as e:  # noqa: BLE001 - a lost answer is reported, not retried
                print(f"FAILED {i} {type(e).__name__}: {e}".replace("\n", " "), flush=True)
                continue
            if r.is_error:
                print(f"FAILED {i} {text_of(r)}".replace("\n", " "), flush=True)
            else:
                print(f"ACCEPTED {i} {r.structured_content['proposal']}", flush=True)
            if i == pause_at:
                print("PAUSED", flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
        await list_tools(session, "list-tools-after")


async def propose(url, token, project, gid):
    async with client(url, token) as session:
        print(f"connected {session.protocol_version}", flush=True)
        r = await session.call_tool("propose_guardrail", guardrail(project, gid))
        check(not r.is_error, f"propose works: {text_of(r)}")
        print(f"PROPOSED {r.structured_content['proposal']}", flush=True)


async def listen(url, token, project, gid):
    uri = f"bridle://rules/{project}/claude"
    async with client(url, token) as session:
        print(f"connected {session.protocol_version}", flush=True)
        async with session.listen(resource_subscriptions=[uri]) as sub:
            print("LISTENING", flush=True)
            with anyio.fail_after(60):
                async for event in sub:
                    if getattr(event, "uri", None) == uri:
                        break
        read = await session.read_resource(uri)
        shown = gid in read.contents[0].text
        print(f"UPDATED {uri} {'shows' if shown else 'lacks'}", flush=True)


def main():
    mode, url, token, project, arg = sys.argv[1:6]
    if mode in ("traffic", "legacy-traffic"):
        pause_at = int(sys.argv[6]) if len(sys.argv) > 6 else None
        sdk_mode = "legacy" if mode == "legacy-traffic" else "auto"
        anyio.run(traffic, url, token, project, int(arg), pause_at, sdk_mode)
    elif mode == "propose":
        anyio.run(propose, url, token, project, arg)
    elif mode == "listen":
        anyio.run(listen, url, token, project, arg)
    else:
        check(False, f"unknown mode {mode}")


if __name__ == "__main__":
    main()
