// An MCP host for the tests of `troupe mcp serve`, on the official
// TypeScript SDK (@modelcontextprotocol/sdk from npm, installed by
// .ci/mcp-up; TROUPE_MCP_SDK_NPM names its node_modules).
//
//   node host.mjs SCENARIO stdio COMMAND [ARGS...]
//   node host.mjs SCENARIO http URL TOKEN
//
// It plays one scenario against the server, as a main agent would, and
// prints one JSON object on stdout: what the server answered. The Rust
// tests assert on it and on the files the agents left.
import path from 'node:path';

const sdk = (file) => import(path.join(process.env.TROUPE_MCP_SDK_NPM, '@modelcontextprotocol/sdk/dist/esm', file));
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { LoggingMessageNotificationSchema } = await sdk('types.js');

const [scenario, kind, ...target] = process.argv.slice(2);
const logs = [];
const client = new Client({ name: 'troupe-test-host', version: '1.0.0' }, { capabilities: {} });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params.data); });
const transport = kind === 'stdio'
  ? new StdioClientTransport({ command: target[0], args: target.slice(1), env: process.env, stderr: 'inherit' })
  : new StreamableHTTPClientTransport(new URL(target[0]), { requestInit: { headers: { Authorization: `Bearer ${target[1]}` } } });
await client.connect(transport);

const timeout = 120000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (r) => (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const call = async (name, args, options = {}) => {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout, ...options });
  return { is_error: Boolean(r.isError), structured: r.structuredContent ?? null, text: text(r) };
};

const scenarios = {
  async listing() {
    const { tools } = await client.listTools();
    return { tools: tools.map((t) => ({ name: t.name, input_schema: t.inputSchema, read_only: Boolean(t.annotations?.readOnlyHint) })) };
  },
  async blocking() {
    const progress = [];
    const created = await call('create_sub_agent', { agent_id: 1, summary: 'write a greeting', task: 'write greeting.txt' },
      { onprogress: (p) => progress.push({ progress: p.progress, message: p.message }), resetTimeoutOnProgress: true });
    return { created, progress };
  },
  async background() {
    const started = [];
    for (const n of [1, 2, 3]) {
      started.push(await call('create_sub_agent', { summary: `background task ${n}`, task: 'write a file', run_in_background: true }));
    }
    const waits = [];
    for (let i = 0; i < 20; i++) {
      const waited = await call('wait_sub_agents', { mode: 'any', timeout_seconds: 30 });
      waits.push(waited);
      if (waited.structured.running.length === 0) break;
    }
    const status = await call('get_sub_agent_status', {});
    return { started, waits, logs, status };
  },
  async notices() {
    const started = await call('create_sub_agent', { summary: 'noticed later', task: 'write a file', run_in_background: true });
    for (let i = 0; i < 600 && logs.length === 0; i++) await sleep(100);
    const later = await call('get_sub_agent_status', { agent_ids: [started.structured.agent_id] });
    const again = await call('get_sub_agent_status', {});
    return { started, logs, later, again };
  },
  async terminate() {
    const started = await call('create_sub_agent', { agent_id: 1, summary: 'a long task', task: 'write part.txt, then think', run_in_background: true });
    for (let i = 0; i < 300; i++) {
      const status = await call('get_sub_agent_status', { agent_ids: [1] });
      if (status.structured.agents[0].last_action.includes('turn 2')) break;
      await sleep(200);
    }
    const stopped = await call('terminate_sub_agent', { agent_id: 1 });
    const status = await call('get_sub_agent_status', { agent_ids: [1] });
    return { started, stopped, status };
  },
  async cancel() {
    const abort = new AbortController();
    const progress = [];
    try {
      await call('create_sub_agent', { agent_id: 1, summary: 'cancelled', task: 'write part.txt, then think' }, {
        signal: abort.signal,
        onprogress: (p) => { progress.push(p.message ?? ''); if ((p.message ?? '').startsWith('write_file')) abort.abort('the host changed its mind'); },
      });
    } catch (e) {
      if (!abort.signal.aborted) throw e;
    }
    let final = null;
    for (let i = 0; i < 300; i++) {
      final = (await call('get_sub_agent_status', { agent_ids: [1] })).structured.agents[0];
      if (final.status !== 'running') break;
      await sleep(200);
    }
    const after = await call('get_sub_agent_status', {});
    return { progress, final, still_answers: !after.is_error };
  },
};

const report = await scenarios[scenario]();
console.log(JSON.stringify(report));
await client.close();
process.exit(0);
