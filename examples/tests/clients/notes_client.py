"""Interop client: drives the Kberg notes app (`kberg-interop`) with the official Python MCP SDK.

Run by examples/tests/interop_python.rs with the pinned SDK (PyPI `mcp==2.3.0`, installed into
.tools/venv by scripts/install-tools.sh):

    python notes_client.py --url http://127.0.0.1:PORT/mcp [--mode auto|legacy]
    python notes_client.py --stdio /path/to/kberg-interop [--mode auto|legacy]

`auto` is the SDK's default (2026-07-28 via server/discover, falling back to initialize);
`legacy` forces the 2025-11-25 initialize handshake. Every check prints one line
`ok <name> ...`; the first failed check prints `FAIL <name>: <why>` and exits 1. The last line
is `done <protocol version>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

WRITER_TOKEN = "writer-token-for-tests"
READER_TOKEN = "reader-token-for-tests"
ALL_NOTES = "notes://all"
TIMEOUT_S = 20


class CheckFailed(Exception):
    pass


def ok(name: str, detail: str = "") -> None:
    print(f"ok {name} {detail}".rstrip(), flush=True)


def check(cond: bool, name: str, why: str) -> None:
    if not cond:
        raise CheckFailed(f"{name}: {why}")


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def make_client(args: argparse.Namespace, token: str, **kw: Any) -> Client:
    if args.stdio:
        server: Any = StdioServerParameters(command=args.stdio, args=["--stdio", "--as", "writer"])
    else:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        server = streamable_http_client(args.url, http_client=http)
    return Client(server, mode=args.mode, read_timeout_seconds=TIMEOUT_S, **kw)


async def expect_update(args: argparse.Namespace, writer: Client, updates: list[str], got: anyio.Event) -> None:
    """Subscribe to notes://all, add a note, and wait for the update."""
    modern = writer.protocol_version >= "2026-07-28"
    if modern:
        async with writer.listen(resource_subscriptions=[ALL_NOTES]) as sub:
            ok("listen-acknowledged")
            added = await writer.call_tool("add_note", {"title": "From Python", "body": "hello"})
            check(not added.is_error, "add-note", text_of(added))
            with anyio.fail_after(TIMEOUT_S):
                async for event in sub:
                    if getattr(event, "uri", None) == ALL_NOTES:
                        break
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await writer.subscribe_resource(ALL_NOTES)
        ok("subscribed")
        added = await writer.call_tool("add_note", {"title": "From Python", "body": "hello"})
        check(not added.is_error, "add-note", text_of(added))
        with anyio.fail_after(TIMEOUT_S):
            await got.wait()
        check(ALL_NOTES in updates, "resource-updated", f"updates {updates}")
    ok("resource-updated", ALL_NOTES)
    read = await writer.read_resource(ALL_NOTES)
    body = json.loads(read.contents[0].text)
    check(any(n["title"] == "From Python" for n in body), "read-after-update", str(body))
    ok("read-after-update")


async def cancel_slow_call(writer: Client) -> None:
    """Start slow_count, wait for its first progress, cancel it, and see the tool observe it."""
    before = (await writer.call_tool("cancellations", {})).structured_content["cancellations"]
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    async with anyio.create_task_group() as tg:

        async def slow() -> None:
            await writer.call_tool("slow_count", {"steps": 1000, "delay_ms": 50}, progress_callback=on_progress)

        tg.start_soon(slow)
        with anyio.fail_after(TIMEOUT_S):
            await progressed.wait()
        tg.cancel_scope.cancel()
    ok("slow-call-cancelled-by-client")
    # The server learns of the cancellation asynchronously (a cancelled notification, or the
    # request's connection closing); poll until the tool has observed it.
    with anyio.fail_after(TIMEOUT_S):
        while True:
            after = (await writer.call_tool("cancellations", {})).structured_content["cancellations"]
            if after > before:
                break
            await anyio.sleep(0.05)
    ok("tool-observed-cancellation", f"{before}->{after}")


async def run(args: argparse.Namespace) -> str:
    updates: list[str] = []
    got_update = anyio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            updates.append(root.params.uri)
            got_update.set()

    logs: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    # log_level opts 2026-07-28 requests in to log messages; a 2025-11-25 session gets them at
    # the server's default level.
    async with make_client(
        args, WRITER_TOKEN, message_handler=on_message, logging_callback=on_log, log_level="info"
    ) as writer:
        version = writer.protocol_version
        ok("connected", version)

        tools = {t.name: t for t in (await writer.list_tools()).tools}
        for name in ("list_notes", "read_note", "add_note", "delete_note", "slow_count"):
            check(name in tools, "list-tools", f"{name} missing from {sorted(tools)}")
        check(tools["list_notes"].annotations.read_only_hint is True, "list-tools", "list_notes is not read-only")
        check(tools["add_note"].annotations.read_only_hint is False, "list-tools", "add_note claims read-only")
        ok("list-tools", str(len(tools)))

        listed = await writer.call_tool("list_notes", {})
        check(not listed.is_error, "call-read", text_of(listed))
        check(listed.structured_content["notes"][0]["title"] == "Welcome", "call-read", str(listed.structured_content))
        ok("call-read")

        refused = await writer.call_tool("delete_note", {"id": "n1"})
        check(refused.is_error is True, "write-refused", "delete_note ran without notes.delete")
        code = (refused.structured_content or {}).get("code")
        check(code == "capability_required", "write-refused", f"code {code!r}")
        check((refused.structured_content or {}).get("capability") == "notes.delete", "write-refused",
              str(refused.structured_content))
        ok("write-refused", code)

        invalid = await writer.call_tool("add_note", {"title": 42})
        check(invalid.is_error is True, "invalid-arguments", "add_note accepted a number as title")
        sc = invalid.structured_content or {}
        check(sc.get("code") == "invalid_arguments", "invalid-arguments", str(sc))
        pointers = sorted(e["pointer"] for e in sc.get("errors", []))
        check("/title" in pointers and "/body" in pointers, "invalid-arguments", f"pointers {pointers}")
        ok("invalid-arguments", ",".join(pointers))

        if not args.stdio:
            async with make_client(args, READER_TOKEN) as reader:
                r = await reader.call_tool("add_note", {"title": "nope", "body": "nope"})
                check((r.structured_content or {}).get("code") == "capability_required", "reader-refused",
                      str(r.structured_content))
                ok("reader-refused")

        await expect_update(args, writer, updates, got_update)

        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        done = await writer.call_tool("slow_count", {"steps": 3, "delay_ms": 10}, progress_callback=on_progress)
        check(text_of(done) == "counted to 3", "progress", text_of(done))
        check(seen == [1, 2, 3], "progress", f"progress {seen}")
        ok("progress", str(seen))
        # The tool's log messages travel with its call: all there when the result is.
        wanted = [f"counted {i} of 3" for i in (1, 2, 3)]
        check(logs[-3:] == wanted, "log-messages", f"log messages {logs}")
        ok("log-messages", str(len(logs)))

        await cancel_slow_call(writer)

        try:
            await writer.call_tool("no_such_tool", {})
            raise CheckFailed("unknown-tool: no error")
        except MCPError as e:
            check(e.error.code == -32602, "unknown-tool", f"code {e.error.code}")
        ok("unknown-tool")
    ok("session-ended")
    return version


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url")
    p.add_argument("--stdio", help="path of the kberg-interop binary to spawn")
    p.add_argument("--mode", default="auto")
    args = p.parse_args()
    if not args.url and not args.stdio:
        p.error("--url or --stdio is required")
    try:
        version = anyio.run(run, args)
    except CheckFailed as e:
        print(f"FAIL {e}", flush=True)
        return 1
    except BaseException as e:  # noqa: BLE001 - report anything, including task-group errors
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        if isinstance(e, CheckFailed):
            print(f"FAIL {e}", flush=True)
        else:
            print(f"FAIL unexpected: {type(e).__name__}: {e}", flush=True)
        return 1
    print(f"done {version}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
