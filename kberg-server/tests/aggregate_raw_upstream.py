"""A deliberately misbehaving MCP server over stdio, for the aggregator's tests.

It speaks the MCP stdio transport (newline-delimited JSON-RPC 2.0: `initialize`, `tools/list`,
`tools/call`, `prompts/list`, `prompts/get`, `resources/list`, `resources/read` with their
documented result shapes) well enough to be connected to, then misbehaves on purpose: the `hang`
tool, prompt and resource never answer, the `garbage` ones answer a result that is not the
documented shape (the tool's with `keys` more keys, and one naming `RAW_LEAK_TOKEN` when that
is set), and every `notifications/cancelled` it receives is recorded and reported by
the `cancelled` tool, so a test can check that an abandoned request was cancelled upstream.
With `RAW_LIST_PAGES=endless` its tool list never ends (every page names a new cursor), with
`RAW_LIST_PAGES=repeating` every page names the same cursor. The `flood` tool sends `n` progress
notifications (when the call has a progress token) and `n` log messages before it answers;
called with `refuse_chars` it refuses instead, with a message that many characters long.
With `RAW_SUBSCRIBE=hang` it advertises resource subscriptions and never answers
`resources/subscribe`; the `subscribes` tool reports the URIs it was asked to subscribe.
With `RAW_TASKS=stale` it also has the `ask` tool, which runs as a task (the tasks extension)
and asks two questions, `q1` then `q2`, as an eventually consistent server may: after `q1` is
answered its next two `tasks/get` still list `q1`, and the one after lists `q1` beside `q2`.
The finished task's text is the list of keys each `tasks/update` carried.
With `RAW_TASKS=stuck` it has the `stuck` tool, which runs as a task whose `ttlMs` is
`RAW_TASK_TTL` (default 1) and which stays `working` whatever it is asked; the `task_log` tool
reports how many `tasks/get` it answered and which tasks it was asked to cancel. With
`RAW_LEAK_TOKEN` set too, a `stuck` task's id carries that token and a line break (then
`FORGED log line`), and its `tasks/cancel` is refused.
With `RAW_TASKS=stuck` it also has the `stuck_ask` tool, which runs as a task that asks `q1`
on every `tasks/get` (`input_required`, its `ttlMs` that of `stuck`) and never finishes; its
cancel is recorded as a `stuck` task's.
With `RAW_FORGE` set its words try to forge lines of a text log: a tool and a prompt whose names
hold a line break, a `resources/list` error whose message holds a CR LF, and a stderr line with
a line separator, a CR and an ESC, each followed by `FORGED`.
With `RAW_TASKS=paused` it has the `pause` tool, which runs as a task that its first two
`tasks/get` show in a status this protocol revision does not have (`paused`), then completed
with the text `resumed`.
With `RAW_TASKS=fails` it has the `fails` tool, which runs as a task that `tasks/get` shows
failed, its error's message `fail_chars` characters long; called with `malformed` true, its
task is shown `completed` without a result.
With `RAW_LEAK_TOKEN` set it also has the `leak` tool, which says that token back as a chatty
(or compromised) server might, each time beside ordinary text: in an `elicitation/create`
request (its message and its schema); once that is answered, in a log message (in its `logger`
and nested in its `data`) and a progress message (when the call has a progress token), then in
the question `Finished with <token>?`. Until that is answered with `{"ok": true}` (the client
says it got both messages) it sends them again, the progress figure one higher each round; then
it answers with the number of rounds.
"""
import json, os, sys

# A server that prints its configuration at start, credential included, as some do. The
# aggregator must log these lines with the credential redacted, and cut the overlong one.
if os.environ.get("RAW_STDERR_TOKEN"):
    sys.stderr.write("raw upstream starting, token=" + os.environ["RAW_STDERR_TOKEN"] + "\n")
    sys.stderr.write("x" * 10000 + "\n")
    sys.stderr.write("raw upstream ready\n")
    sys.stderr.flush()

# A stderr line that tries to start others (U+2028, CR) and to drive a terminal (ESC).
if os.environ.get("RAW_FORGE"):
    sys.stderr.buffer.write(("raw upstream forging\u2028FORGED separator line\rFORGED cr line"
                             "\x1b[2K done\n").encode("utf-8"))
    sys.stderr.flush()

# The names of its environment, one line, for the tests of what a child inherits.
if os.environ.get("RAW_STDERR_ENV"):
    sys.stderr.write("raw upstream env: " + ",".join(sorted(os.environ)) + "\n")
    sys.stderr.flush()

cancelled = []
subscribes = []
tasks = {}
pages = 0
PROTOCOL = "2025-11-25"

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

def result(rid, r):
    send({"jsonrpc": "2.0", "id": rid, "result": r})

def text(t):
    return {"content": [{"type": "text", "text": t}]}

OBJ = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "hang", "description": "never answers", "inputSchema": OBJ},
    {"name": "garbage", "description": "answers a malformed result", "inputSchema": OBJ},
    {"name": "cancelled", "description": "the request ids cancelled so far", "inputSchema": OBJ},
    {"name": "subscribes", "description": "the URIs asked to be subscribed so far", "inputSchema": OBJ},
    {"name": "flood", "description": "floods progress and log messages, then answers",
     "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
]

if os.environ.get("RAW_TASKS") == "stale":
    TOOLS.append({"name": "ask", "description": "asks q1 and q2 as a task, slow to show answers",
                  "inputSchema": OBJ, "execution": {"taskSupport": "optional"}})

if os.environ.get("RAW_TASKS") == "stuck":
    TOOLS.append({"name": "stuck", "description": "a task that stays working",
                  "inputSchema": OBJ, "execution": {"taskSupport": "optional"}})
    TOOLS.append({"name": "task_log", "description": "polls answered, tasks cancelled",
                  "inputSchema": OBJ})
    TOOLS.append({"name": "stuck_ask", "description": "a task that asks and never finishes",
                  "inputSchema": OBJ, "execution": {"taskSupport": "optional"}})

if os.environ.get("RAW_FORGE"):
    TOOLS.append({"name": "forged\nFORGED tool line", "inputSchema": OBJ})

if os.environ.get("RAW_TASKS") == "paused":
    TOOLS.append({"name": "pause", "description": "a task in a status from a later revision",
                  "inputSchema": OBJ, "execution": {"taskSupport": "optional"}})

if os.environ.get("RAW_TASKS") == "fails":
    TOOLS.append({"name": "fails", "description": "a task that fails with a long message",
                  "inputSchema": {"type": "object",
                                  "properties": {"fail_chars": {"type": "integer"}}},
                  "execution": {"taskSupport": "optional"}})

# The `stuck` tasks' record: `tasks/get` answered, task ids cancelled.
stuck_log = {"polls": 0, "cancelled": []}

if os.environ.get("RAW_LEAK_TOKEN"):
    TOOLS.append({"name": "leak", "description": "says its token back to the client",
                  "inputSchema": OBJ})

# Elicitation requests the `leak` tool sent -> (the id of the tool call waiting for the answer,
# the call's progress token, the round: 0 for the first question, then 1, 2, ...).
leaks = {}
asked = [0]

def leak_ask(rid, progress, message, round_):
    asked[0] += 1
    ask = "leak-%d" % asked[0]
    leaks[ask] = (rid, progress, round_)
    token = os.environ["RAW_LEAK_TOKEN"]
    send({"jsonrpc": "2.0", "id": ask, "method": "elicitation/create", "params": {
        "mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {
            "ok": {"type": "boolean", "description": "allow " + token}}}}})

def leak_round(rid, progress, round_):
    """One round after the first question: a log message and a progress message, then the
    question whose answer says whether the client got them (a message sent before the
    aggregator knew the call may have gone nowhere)."""
    token = os.environ["RAW_LEAK_TOKEN"]
    send({"jsonrpc": "2.0", "method": "notifications/message", "params": {
        "level": "warning", "logger": "backend " + token,
        "data": {"note": "the backend refused the call",
                 "detail": {"error": "invalid token " + token, "tried": ["plain text", token]},
                 "attempts": 3}}})
    if progress is not None:
        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
            "progressToken": progress, "progress": round_, "total": round_ + 1,
            "message": "signed in with " + token + ", fetching"}})
    leak_ask(rid, progress, "Finished with " + token + "?", round_)

NOW = "2026-01-01T00:00:00Z"

def task_fields(tid, status):
    return {"taskId": tid, "status": status, "createdAt": NOW, "lastUpdatedAt": NOW,
            "ttlMs": None, "pollIntervalMs": 50}

def question(text):
    return {"method": "elicitation/create", "params": {
        "message": text,
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}

def task_view(tid):
    t = tasks[tid]
    if "paused" in t:
        t["paused"] += 1
        if t["paused"] <= 2:
            return task_fields(tid, "paused")
        view = task_fields(tid, "completed")
        view["result"] = text("resumed")
        return view
    if t.get("malformed"):
        return task_fields(tid, "completed")
    if "fails" in t:
        view = task_fields(tid, "failed")
        view["error"] = {"code": -32603, "message": "x" * t["fails"]}
        return view
    if t.get("stuck"):
        stuck_log["polls"] += 1
        if t.get("asks"):
            view = task_fields(tid, "input_required")
            view["inputRequests"] = {"q1": question("first?")}
        else:
            view = task_fields(tid, "working")
        view["ttlMs"] = int(os.environ.get("RAW_TASK_TTL", "1"))
        return view
    answered = t["answers"]
    if "q1" not in answered:
        asks = {"q1": question("first?")}
    elif t["stale"] < 2:
        t["stale"] += 1
        asks = {"q1": question("first?")}
    elif "q2" not in answered:
        asks = {"q1": question("first?"), "q2": question("second?")}
    else:
        view = task_fields(tid, "completed")
        view["result"] = text(json.dumps(t["updates"]))
        return view
    view = task_fields(tid, "input_required")
    view["inputRequests"] = asks
    return view

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method = msg.get("method")
    rid = msg.get("id")
    params = msg.get("params") or {}
    if method == "notifications/cancelled":
        cancelled.append(params.get("requestId"))
        continue
    if rid is None:
        continue
    if method is None:
        # An answer to one of its own requests: a question of the `leak` tool.
        question = leaks.pop(rid, None)
        if question is not None:
            call, progress, round_ = question
            answer = msg.get("result") or {}
            if round_ > 0 and (answer.get("content") or {}).get("ok") is True:
                result(call, text("told in %d rounds" % round_))
            else:
                leak_round(call, progress, round_ + 1)
        continue
    if method == "initialize":
        result(rid, {
            "protocolVersion": params.get("protocolVersion", PROTOCOL),
            "capabilities": {"tools": {}, "prompts": {}, "resources": (
                {"subscribe": True} if os.environ.get("RAW_SUBSCRIBE") else {})},
            "serverInfo": {"name": "raw", "version": "1"},
        })
    elif method == "ping":
        result(rid, {})
    elif method == "tools/list" and os.environ.get("RAW_LIST_PAGES"):
        pages += 1
        endless = os.environ["RAW_LIST_PAGES"] == "endless"
        result(rid, {
            "tools": [{"name": "t%d" % pages, "inputSchema": OBJ}],
            "nextCursor": "page-%d" % pages if endless else "again",
        })
    elif method == "tools/list":
        result(rid, {"tools": TOOLS})
    elif method == "tools/call":
        name = params.get("name")
        if name == "hang":
            continue
        if name == "garbage":
            # Not a CallToolResult: `content` must be an array of content blocks. With `keys`
            # it has that many more keys; with RAW_LEAK_TOKEN set, one more names the token.
            r = {"content": "not a list", "isError": "maybe"}
            for i in range((params.get("arguments") or {}).get("keys", 0)):
                r["key-%d" % i] = i
            if os.environ.get("RAW_LEAK_TOKEN"):
                r["token " + os.environ["RAW_LEAK_TOKEN"]] = 1
            result(rid, r)
        elif name == "cancelled":
            result(rid, text(json.dumps(cancelled)))
        elif name == "subscribes":
            result(rid, text(json.dumps(subscribes)))
        elif name == "ask" and os.environ.get("RAW_TASKS") == "stale":
            tid = "task-%d" % (len(tasks) + 1)
            tasks[tid] = {"answers": {}, "updates": [], "stale": 0}
            r = task_fields(tid, "working")
            r["resultType"] = "task"
            result(rid, r)
        elif name == "stuck" and os.environ.get("RAW_TASKS") == "stuck":
            tid = "task-%d" % (len(tasks) + 1)
            if os.environ.get("RAW_LEAK_TOKEN"):
                tid += "-" + os.environ["RAW_LEAK_TOKEN"] + "\nFORGED log line"
            tasks[tid] = {"stuck": True}
            r = task_fields(tid, "working")
            r["ttlMs"] = int(os.environ.get("RAW_TASK_TTL", "1"))
            r["resultType"] = "task"
            result(rid, r)
        elif name == "stuck_ask" and os.environ.get("RAW_TASKS") == "stuck":
            tid = "task-%d" % (len(tasks) + 1)
            tasks[tid] = {"stuck": True, "asks": True}
            r = task_fields(tid, "working")
            r["ttlMs"] = int(os.environ.get("RAW_TASK_TTL", "1"))
            r["resultType"] = "task"
            result(rid, r)
        elif name == "pause" and os.environ.get("RAW_TASKS") == "paused":
            tid = "task-%d" % (len(tasks) + 1)
            tasks[tid] = {"paused": 0}
            r = task_fields(tid, "working")
            r["resultType"] = "task"
            result(rid, r)
        elif name == "fails" and os.environ.get("RAW_TASKS") == "fails":
            tid = "task-%d" % (len(tasks) + 1)
            tasks[tid] = {"fails": (params.get("arguments") or {}).get("fail_chars", 10),
                          "malformed": (params.get("arguments") or {}).get("malformed", False)}
            r = task_fields(tid, "working")
            r["resultType"] = "task"
            result(rid, r)
        elif name == "task_log":
            result(rid, text(json.dumps(stuck_log)))
        elif name == "leak" and os.environ.get("RAW_LEAK_TOKEN"):
            token = os.environ["RAW_LEAK_TOKEN"]
            progress = (params.get("_meta") or {}).get("progressToken")
            leak_ask(rid, progress, "Use the token " + token + " for this call?", 0)
        elif name == "flood" and (params.get("arguments") or {}).get("refuse_chars"):
            # A refusal whose message is `refuse_chars` characters long.
            chars = params["arguments"]["refuse_chars"]
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "x" * chars}})
        elif name == "flood":
            n = (params.get("arguments") or {}).get("n", 1000)
            token = (params.get("_meta") or {}).get("progressToken")
            for i in range(1, n + 1):
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": i, "total": n}})
                send({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": "line %d" % i}})
            result(rid, text("flooded %d" % n))
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "unknown tool"}})
    elif method == "tasks/get" and params.get("taskId") in tasks:
        result(rid, task_view(params["taskId"]))
    elif method == "tasks/update" and params.get("taskId") in tasks:
        t = tasks[params["taskId"]]
        responses = params.get("inputResponses") or {}
        t.setdefault("updates", []).append(sorted(responses))
        t.setdefault("answers", {}).update(responses)
        result(rid, {})
    elif (method == "tasks/cancel" and os.environ.get("RAW_LEAK_TOKEN")
          and os.environ["RAW_LEAK_TOKEN"] in (params.get("taskId") or "")):
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "cannot cancel"}})
    elif method == "tasks/cancel" and params.get("taskId") in tasks:
        if tasks[params["taskId"]].get("stuck"):
            stuck_log["cancelled"].append(params["taskId"])
        result(rid, {})
    elif method == "prompts/list" and os.environ.get("RAW_FORGE"):
        result(rid, {"prompts": [{"name": "forged\nFORGED prompt line"}]})
    elif method == "resources/list" and os.environ.get("RAW_FORGE"):
        send({"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32603, "message": "no resources\r\nFORGED resources line"}})
    elif method == "prompts/list":
        result(rid, {"prompts": [{"name": "hang"}, {"name": "garbage"}]})
    elif method == "prompts/get":
        if params.get("name") == "hang":
            continue
        result(rid, {"messages": "not a list"})
    elif method == "resources/list":
        result(rid, {"resources": [
            {"uri": "raw://hang", "name": "hang"},
            {"uri": "raw://garbage", "name": "garbage"},
        ]})
    elif method == "resources/templates/list":
        # RFC 6570 form-style query expansion, which the aggregated registry cannot match.
        result(rid, {"resourceTemplates": [{"uriTemplate": "raw://search{?q}", "name": "search"}]})
    elif method == "resources/subscribe":
        subscribes.append(params.get("uri"))
        if os.environ.get("RAW_SUBSCRIBE") == "hang":
            continue
        result(rid, {})
    elif method == "resources/read":
        if params.get("uri") == "raw://hang":
            continue
        result(rid, {"contents": 5})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
