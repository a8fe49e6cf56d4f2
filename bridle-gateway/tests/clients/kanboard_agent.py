"""A coding agent's use of Bridle's Kanboard tools, driven by the official MCP Python SDK.

Run by bridle-gateway/tests/kanboard_mcp.rs against a gateway serving the Kanboard tools over
Streamable HTTP, in front of the Kanboard stand-in:

    python kanboard_agent.py agent URL TOKEN PROJECT_ID UNMAPPED_PROJECT_ID
        Reads, creates (twice with one reference), moves, comments on and closes a task, and
        checks the failure paths. Prints `RESULT <json>`.

    python kanboard_agent.py reader URL TOKEN PROJECT_ID
        As an agent without `kanboard.write`: reads work, every write is refused.
        Prints `RESULT <json>`.

    python kanboard_agent.py badtoken URL
        A wrong bearer token must not get a session. Prints `RESULT <json>`.

    python kanboard_agent.py stdio PROJECT_ID COMMAND ARGS...
        Starts COMMAND (`bridle kanboard serve ...`) as an MCP server over stdio, lists the
        tools, reads and creates a task. Prints `RESULT <json>`.

Exit status 0 means every check held; otherwise the failing check is on stderr.
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TOOLS = {
    "whoami", "list_projects", "get_project", "project_context", "get_board", "list_tasks",
    "search_tasks", "get_task", "my_tasks", "overdue_tasks", "create_task", "update_task",
    "move_task", "close_task", "reopen_task", "assign_task", "set_tags", "add_comment",
    "create_subtask", "update_subtask",
}


def check(cond, what):
    if not cond:
        print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def structured(result):
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None) or {}


async def ok(session, name, args):
    r = await session.call_tool(name, args)
    check(not r.is_error, f"{name} works: {text_of(r)}")
    return structured(r)


async def refused(session, name, args):
    """A call that must fail: as an error result (its code returned) or a JSON-RPC error."""
    try:
        r = await session.call_tool(name, args)
    except Exception as e:  # noqa: BLE001 - a protocol error is a refusal here
        return "protocol_error", str(e)
    check(r.is_error, f"{name} {args} must fail, got {text_of(r)}")
    return structured(r).get("code", ""), text_of(r)


async def connect(url, token, body):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


async def agent(url, token, project, unmapped):
    async def body(session):
        listed = {t.name for t in (await session.list_tools()).tools}
        check(TOOLS <= listed, f"every Kanboard tool is offered: missing {TOOLS - listed}")
        check("remove_task" not in listed, "deletes are not offered")

        me = await ok(session, "whoami", {})
        check(me["kind"] == "user" and me["user"]["username"] == "claude-bot", f"whoami: {me}")
        ctx = await ok(session, "project_context", {"project_id": project})
        columns = [c["name"] for c in ctx["columns"]]
        check(columns[:2] == ["Backlog", "Ready"], f"columns: {columns}")

        args = {"project_id": project, "title": "Ship the Python client", "column": "Ready",
                "owner": "claude-bot", "date_due": "2026-12-31", "reference": "PY-1"}
        created = await ok(session, "create_task", args)
        check(created["created"] is True, f"created: {created}")
        task_id = created["task_id"]
        again = await ok(session, "create_task", args)
        check(again["created"] is False and again["task"]["id"] == task_id, f"retry found it: {again}")

        moved = await ok(session, "move_task", {"task_id": task_id, "column": "work in progress"})
        check(moved["column"] == "Work in progress", f"moved: {moved}")
        await ok(session, "add_comment", {"task_id": task_id, "content": "Started."})
        task = await ok(session, "get_task", {"task_id": task_id, "comments": True})
        check(task["date_due"] == "2026-12-31T00:00:00Z", f"ISO date out: {task}")
        check(task["comments"][0]["user"] == "claude-bot", f"comment author: {task}")
        closed = await ok(session, "close_task", {"task_id": task_id})
        check(closed["status"] == "closed", f"closed: {closed}")

        code, text = await refused(session, "get_board", {"project_id": unmapped})
        check(code == "project_not_mapped", f"unmapped project refused: {code} {text}")
        code, text = await refused(session, "create_task", {"project_id": project, "title": "x", "column": "Doing"})
        check(code == "unknown_name" and "Backlog" in text, f"unknown column answered with choices: {text}")
        code, text = await refused(session, "create_task", {"project_id": project, "title": "x", "date_due": "1798736400"})
        check(code == "invalid_date", f"epoch date refused: {code} {text}")
        code, text = await refused(session, "remove_task", {"task_id": task_id})
        check("close_task" in text, f"delete refused with a reason: {text}")
        code, text = await refused(session, "get_task", {"task_id": 9999})
        check(code == "task_not_found", f"missing task: {code}")
        return {"task_id": task_id, "columns": columns}

    return await connect(url, token, body)


async def reader(url, token, project):
    async def body(session):
        me = await ok(session, "whoami", {})
        tasks = await ok(session, "list_tasks", {"project_id": project, "status": "closed"})
        code, text = await refused(session, "create_task", {"project_id": project, "title": "nope"})
        check(code in ("capability_required", "protocol_error") and "kanboard.write" in text,
              f"write refused for want of kanboard.write: {code} {text}")
        code, text = await refused(session, "close_task", {"task_id": 1})
        check("kanboard.write" in text, f"close refused: {text}")
        return {"user": me["user"]["username"], "closed": len(tasks["tasks"])}

    return await connect(url, token, body)


async def badtoken(url):
    try:
        await connect(url, "not-a-token", lambda s: s.list_tools())
    except BaseException as e:  # noqa: BLE001 - the SDK raises an exception group
        return {"refused": True, "error": type(e).__name__}
    check(False, "a wrong token got a session")


async def stdio(project, command, args):
    params = StdioServerParameters(command=command, args=args)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = {t.name for t in (await session.list_tools()).tools}
            check(TOOLS <= listed, f"every Kanboard tool is offered over stdio: missing {TOOLS - listed}")
            me = await ok(session, "whoami", {})
            created = await ok(session, "create_task", {"project_id": project, "title": "Over stdio", "column": "Ready"})
            board = await ok(session, "get_board", {"project_id": project})
            code, _ = await refused(session, "get_project", {"project_id": project + 100})
            check(code == "project_not_mapped", f"unmapped project over stdio: {code}")
            titles = [t["title"] for lane in board["swimlanes"] for c in lane["columns"] for t in c["tasks"]]
            return {"kind": me["kind"], "task_id": created["task_id"], "titles": titles}


def main():
    mode = sys.argv[1]
    if mode == "agent":
        result = anyio.run(agent, sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "reader":
        result = anyio.run(reader, sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "stdio":
        result = anyio.run(stdio, int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    else:
        result = anyio.run(badtoken, sys.argv[2])
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
