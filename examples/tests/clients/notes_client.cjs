// Interop client: drives the Kberg notes app (`kberg-interop`) with the official TypeScript MCP SDK
// (npm `@modelcontextprotocol/sdk@1.32.2`, protocol 2025-11-25), installed into .tools/node by
// scripts/install-tools.sh. Run by examples/tests/interop_typescript.rs:
//
//   node notes_client.cjs <tools-dir> <url>
//
// Every check prints `ok <name> ...`; the first failed check prints `FAIL <name>: <why>` and the
// process exits 1. The last line is `done <protocol version>`.
'use strict';

const path = require('node:path');
const { createRequire } = require('node:module');

const [toolsDir, url] = process.argv.slice(2);
if (!toolsDir || !url) {
  console.log('FAIL usage: node notes_client.cjs <tools-dir> <url>');
  process.exit(2);
}
const sdk = createRequire(path.join(toolsDir, 'node', 'node_modules', 'noop.js'));
const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/sdk/client/streamableHttp.js');
const {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  McpError,
} = sdk('@modelcontextprotocol/sdk/types.js');

const WRITER_TOKEN = 'writer-token-for-tests';
const READER_TOKEN = 'reader-token-for-tests';
const ALL_NOTES = 'notes://all';
const TIMEOUT_MS = 20000;

class CheckFailed extends Error {}

function ok(name, detail = '') {
  console.log(`ok ${name} ${detail}`.trimEnd());
}

function check(cond, name, why) {
  if (!cond) throw new CheckFailed(`${name}: ${why}`);
}

function textOf(result) {
  return (result.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`${what}: timed out`)), TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function connect(token) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'kberg-interop-ts', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}

async function callCount(client) {
  const r = await client.callTool({ name: 'cancellations', arguments: {} });
  return r.structuredContent.cancellations;
}

async function main() {
  const { client, transport } = await connect(WRITER_TOKEN);
  const version = transport.protocolVersion;
  const sessionId = transport.sessionId;
  check(typeof sessionId === 'string' && sessionId.length > 0, 'connected', 'no session id');
  ok('connected', version);

  const tools = Object.fromEntries((await client.listTools()).tools.map((t) => [t.name, t]));
  for (const name of ['list_notes', 'read_note', 'add_note', 'delete_note', 'slow_count']) {
    check(name in tools, 'list-tools', `${name} missing`);
  }
  check(tools.add_note.annotations.readOnlyHint === false, 'list-tools', 'add_note claims read-only');
  check(tools.add_note.inputSchema.required.includes('title'), 'list-tools', 'add_note schema lost `required`');
  ok('list-tools', String(Object.keys(tools).length));

  const listed = await client.callTool({ name: 'list_notes', arguments: {} });
  check(!listed.isError, 'call-read', textOf(listed));
  check(listed.structuredContent.notes[0].title === 'Welcome', 'call-read', JSON.stringify(listed.structuredContent));
  ok('call-read');

  const refused = await client.callTool({ name: 'delete_note', arguments: { id: 'n1' } });
  check(refused.isError === true, 'write-refused', 'delete_note ran without notes.delete');
  check(refused.structuredContent.code === 'capability_required', 'write-refused', JSON.stringify(refused.structuredContent));
  ok('write-refused', refused.structuredContent.code);

  const invalid = await client.callTool({ name: 'add_note', arguments: { title: 42 } });
  check(invalid.isError === true, 'invalid-arguments', 'add_note accepted a number as title');
  check(invalid.structuredContent.code === 'invalid_arguments', 'invalid-arguments', JSON.stringify(invalid.structuredContent));
  const pointers = invalid.structuredContent.errors.map((e) => e.pointer).sort();
  check(pointers.includes('/title') && pointers.includes('/body'), 'invalid-arguments', `pointers ${pointers}`);
  ok('invalid-arguments', pointers.join(','));

  const reader = await connect(READER_TOKEN);
  const r = await reader.client.callTool({ name: 'add_note', arguments: { title: 'nope', body: 'nope' } });
  check(r.structuredContent && r.structuredContent.code === 'capability_required', 'reader-refused', JSON.stringify(r.structuredContent));
  await reader.client.close();
  ok('reader-refused');

  const updated = new Promise((resolve) => {
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      if (n.params.uri === ALL_NOTES) resolve(n.params.uri);
    });
  });
  await client.subscribeResource({ uri: ALL_NOTES });
  ok('subscribed');
  const added = await client.callTool({ name: 'add_note', arguments: { title: 'From TypeScript', body: 'hello' } });
  check(!added.isError, 'add-note', textOf(added));
  ok('resource-updated', await within(updated, 'resource-updated'));
  const read = await client.readResource({ uri: ALL_NOTES });
  check(JSON.parse(read.contents[0].text).some((n) => n.title === 'From TypeScript'), 'read-after-update', read.contents[0].text);
  ok('read-after-update');

  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params.data));
  const seen = [];
  const done = await client.callTool({ name: 'slow_count', arguments: { steps: 3, delay_ms: 10 } }, CallToolResultSchema, {
    onprogress: (p) => seen.push(p.progress),
  });
  check(textOf(done) === 'counted to 3', 'progress', textOf(done));
  check(JSON.stringify(seen) === '[1,2,3]', 'progress', `progress ${JSON.stringify(seen)}`);
  ok('progress', JSON.stringify(seen));
  // The tool's log messages travel with its call: all there when the result is.
  const wanted = ['counted 1 of 3', 'counted 2 of 3', 'counted 3 of 3'];
  check(JSON.stringify(logs.slice(-3)) === JSON.stringify(wanted), 'log-messages', `log messages ${JSON.stringify(logs)}`);
  ok('log-messages', String(logs.length));

  const before = await callCount(client);
  const abort = new AbortController();
  let progressed;
  const firstProgress = new Promise((resolve) => { progressed = resolve; });
  const slow = client
    .callTool({ name: 'slow_count', arguments: { steps: 1000, delay_ms: 50 } }, CallToolResultSchema, {
      signal: abort.signal,
      onprogress: () => progressed(),
    })
    .then(() => 'completed', (e) => `rejected: ${e.message}`);
  await within(firstProgress, 'slow-call-progress');
  abort.abort('the test cancels it');
  const outcome = await within(slow, 'slow-call-cancelled');
  check(outcome.startsWith('rejected'), 'slow-call-cancelled-by-client', outcome);
  ok('slow-call-cancelled-by-client');
  let after = before;
  const deadline = Date.now() + TIMEOUT_MS;
  while (after <= before && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 50));
    after = await callCount(client);
  }
  check(after > before, 'tool-observed-cancellation', `${before}->${after}`);
  ok('tool-observed-cancellation', `${before}->${after}`);

  try {
    await client.callTool({ name: 'no_such_tool', arguments: {} });
    throw new CheckFailed('unknown-tool: no error');
  } catch (e) {
    if (e instanceof CheckFailed) throw e;
    check(e instanceof McpError && e.code === -32602, 'unknown-tool', `${e}`);
  }
  ok('unknown-tool');

  await transport.terminateSession();
  await client.close();
  // The ended session is gone: a request naming it is answered 404.
  const gone = await fetch(url, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${WRITER_TOKEN}`,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'Mcp-Session-Id': sessionId,
      'Mcp-Protocol-Version': version,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'tools/list', params: {} }),
  });
  check(gone.status === 404, 'session-ended', `a request on the ended session got HTTP ${gone.status}`);
  ok('session-ended');
  console.log(`done ${version}`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.log(e instanceof CheckFailed ? `FAIL ${e.message}` : `FAIL unexpected: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  },
);
