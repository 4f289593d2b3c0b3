// Validates every OpenAI-shaped body `gpusched serve` sends against the
// schemas of OpenAI's published OpenAPI document (shipped in
// testdata/openai-openapi/schemas.json, MIT; its README says which commit):
// GET /v1/models, chat completions (whole, and each chunk streamed with and
// without usage), legacy completions (whole and each streamed chunk),
// embeddings (float and base64), and the error bodies (401 missing and
// wrong key, 403 admin key, 404 unknown model and unknown path, 400 bad
// body and bad field, 429 tenant rate limit). Run by
// tests/openai_schema_test.sh; every check prints one line and any failure
// exits 1 after running the rest.
//
// Usage: node openai_schema.mjs BASE_URL KEY ADMIN_KEY LIMITED_KEY SCHEMAS
//   BASE_URL: http://127.0.0.1:PORT; KEY: a tenant's key for `chat` and
//   `embed`; LIMITED_KEY: a key of a tenant limited to 1 request a minute.
//
// Where the spec differs from what OpenAI's own servers send, the test
// follows the servers (relaxForServers below says where).
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { check, failures, step } from './report.mjs';

const [base, key, adminKey, limitedKey, schemasPath] = process.argv.slice(2);
if (!base || !key || !adminKey || !limitedKey || !schemasPath) {
  console.error('usage: node openai_schema.mjs BASE_URL KEY ADMIN_KEY LIMITED_KEY SCHEMAS');
  process.exit(2);
}

const doc = JSON.parse(readFileSync(schemasPath, 'utf8'));
const schemas = nullableToAnyOf(structuredClone(doc.components.schemas));
relaxForServers(schemas);

// The document is OpenAPI 3.1 (JSON Schema 2020-12) but some schemas still
// say `nullable: true`, OpenAPI 3.0's way to also allow null (a streamed
// chat choice's `finish_reason`, its `logprobs`): each becomes
// anyOf [the schema, null], its 3.1 spelling.
function nullableToAnyOf(node) {
  if (Array.isArray(node)) return node.map(nullableToAnyOf);
  if (node === null || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (k !== 'nullable') out[k] = nullableToAnyOf(v);
  }
  return node.nullable === true ? { anyOf: [out, { type: 'null' }] } : out;
}

// Where the spec is stricter than OpenAI's servers, follow the servers:
// - A streamed legacy completion's chunks have the shape of
//   CreateCompletionResponse (the spec says so), whose choices'
//   `finish_reason` is a non-null enum; the servers send null on every
//   chunk but the last. CompletionChunk is that schema with null allowed
//   there.
// - Embedding.embedding is an array of floats in the spec; asked for
//   `encoding_format: "base64"`, the servers send the floats as a base64
//   string. Base64EmbeddingResponse is CreateEmbeddingResponse with that.
function relaxForServers(s) {
  s.CompletionChunk = structuredClone(s.CreateCompletionResponse);
  const choice = s.CompletionChunk.properties.choices.items.properties;
  choice.finish_reason = { anyOf: [choice.finish_reason, { type: 'null' }] };
  s.Base64Embedding = structuredClone(s.Embedding);
  s.Base64Embedding.properties.embedding = { type: 'string', pattern: '^[A-Za-z0-9+/]*={0,2}$' };
  s.Base64EmbeddingResponse = structuredClone(s.CreateEmbeddingResponse);
  s.Base64EmbeddingResponse.properties.data.items = { $ref: '#/components/schemas/Base64Embedding' };
}

// Ajv ignores the extension keywords (x-oaiMeta, x-stainless-const).
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addFormat('unixtime', { type: 'number', validate: (x) => Number.isInteger(x) && x >= 0 });
ajv.addSchema({ $id: 'openai', components: { schemas } });
const validators = new Map();
function validate(schema, body, what) {
  if (!validators.has(schema)) {
    validators.set(schema, ajv.getSchema(`openai#/components/schemas/${schema}`));
  }
  const v = validators.get(schema);
  const ok = v(body);
  check(ok, `${what} is a valid ${schema}`, { errors: v.errors?.slice(0, 5), body });
  return ok;
}

async function call(path, { method = 'POST', body, auth = key, raw } = {}) {
  const headers = {};
  if (auth) headers.Authorization = `Bearer ${auth}`;
  if (body !== undefined || raw !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(base + path, {
    method,
    headers,
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  return { status: r.status, type: r.headers.get('content-type') ?? '', text: await r.text() };
}

// Every `data:` payload of an SSE body but [DONE], parsed.
function events(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const data = line.slice(6);
    if (data === '[DONE]') continue;
    out.push(JSON.parse(data));
  }
  return out;
}

async function expectOk(what, path, options, schema) {
  const r = await call(path, options);
  check(r.status === 200, `${what}: 200`, r);
  const body = JSON.parse(r.text);
  validate(schema, body, what);
  return body;
}

async function expectStream(what, path, body, schema) {
  const r = await call(path, { body: { ...body, stream: true } });
  check(r.status === 200 && r.type.startsWith('text/event-stream'), `${what}: 200 SSE`, r);
  check(r.text.trimEnd().endsWith('data: [DONE]'), `${what} ends with [DONE]`, r.text.slice(-80));
  const chunks = events(r.text);
  check(chunks.length >= 2, `${what}: chunks`, chunks.length);
  chunks.forEach((c, i) => validate(schema, c, `${what} chunk ${i}`));
  return chunks;
}

async function expectError(what, status, path, options) {
  const r = await call(path, options);
  check(r.status === status, `${what}: ${status}`, r);
  let body = null;
  try {
    body = JSON.parse(r.text);
  } catch {
    check(false, `${what}: a JSON body`, r.text);
    return null;
  }
  validate('ErrorResponse', body, what);
  return body.error;
}

const chatBody = { model: 'chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 };
const completionBody = { model: 'chat', prompt: 'once upon', max_tokens: 3 };

await step('GET /v1/models', async () => {
  const list = await expectOk('models', '/v1/models', { method: 'GET' }, 'ListModelsResponse');
  const ids = (list.data ?? []).map((m) => m.id);
  check(ids.includes('chat') && ids.includes('embed'), 'models list the deployments', ids);
  for (const m of list.data ?? []) {
    check(m.created > 1.5e9, `${m.id}: created is a Unix time in seconds`, m.created);
  }
});

await step('chat completion', async () => {
  const r = await expectOk('chat', '/v1/chat/completions', { body: chatBody }, 'CreateChatCompletionResponse');
  check(r.choices?.[0]?.logprobs === null, 'chat choice logprobs is null', r.choices?.[0]);
  check(r.choices?.[0]?.message?.refusal === null, 'chat message refusal is null', r.choices?.[0]);
});

await step('chat completion, streamed', async () => {
  const chunks = await expectStream('chat stream', '/v1/chat/completions', chatBody, 'CreateChatCompletionStreamResponse');
  const last = chunks.at(-1);
  check(typeof last?.choices?.[0]?.finish_reason === 'string', 'the last chunk has a finish_reason', last);
});

await step('chat completion, streamed with usage', async () => {
  const chunks = await expectStream(
    'chat stream with usage',
    '/v1/chat/completions',
    { ...chatBody, stream_options: { include_usage: true } },
    'CreateChatCompletionStreamResponse',
  );
  check(chunks.at(-1)?.usage?.completion_tokens === 4, 'the usage chunk', chunks.at(-1));
});

await step('completion (legacy)', async () => {
  const r = await expectOk('completion', '/v1/completions', { body: completionBody }, 'CreateCompletionResponse');
  check(r.choices?.[0]?.logprobs === null, 'completion choice logprobs is null', r.choices?.[0]);
});

await step('completion (legacy), streamed with usage', async () => {
  const chunks = await expectStream(
    'completion stream',
    '/v1/completions',
    { ...completionBody, stream_options: { include_usage: true } },
    'CompletionChunk',
  );
  const finals = chunks.filter((c) => c.choices?.[0]?.finish_reason);
  check(finals.length === 1, 'one chunk with a finish_reason', chunks);
  // Where a finish_reason is given, the spec's own schema holds.
  for (const c of finals) validate('CreateCompletionResponse', c, 'the last completion chunk');
});

await step('embeddings', async () => {
  for (const [encoding_format, schema] of [
    ['float', 'CreateEmbeddingResponse'],
    ['base64', 'Base64EmbeddingResponse'],
  ]) {
    await expectOk(
      `embeddings (${encoding_format})`,
      '/v1/embeddings',
      { body: { model: 'embed', input: ['alpha beta', 'gamma'], encoding_format } },
      schema,
    );
  }
});

await step('errors', async () => {
  const chat = '/v1/chat/completions';
  let e = await expectError('no key', 401, chat, { body: chatBody, auth: null });
  check(e?.code === 'invalid_api_key', 'no key: code invalid_api_key', e);
  e = await expectError('wrong key', 401, chat, { body: chatBody, auth: 'gs-not-a-key' });
  check(e?.code === 'invalid_api_key', 'wrong key: code invalid_api_key', e);
  await expectError('admin key', 403, chat, { body: chatBody, auth: adminKey });
  e = await expectError('unknown model', 404, chat, { body: { ...chatBody, model: 'nope' } });
  check(e?.code === 'model_not_found' && e?.param === null, 'unknown model: model_not_found', e);
  e = await expectError('unknown path', 404, '/v1/nope', { body: chatBody });
  check(e?.code === null, 'unknown path: code null', e);
  await expectError('models, no key', 401, '/v1/models', { method: 'GET', auth: null });
  await expectError('not JSON', 400, chat, { raw: '{"model":' });
  await expectError('bad max_tokens', 400, '/v1/completions', { body: { ...completionBody, max_tokens: 0 } });
  await expectError('bad stream', 400, chat, { body: { ...chatBody, stream: 'yes' } });
  await expectError('embeddings, unknown model', 404, '/v1/embeddings', { body: { model: 'nope', input: 'x' } });
  // 1 request a minute: the first passes, the second is a 429.
  await expectOk('limited tenant', chat, { body: chatBody, auth: limitedKey }, 'CreateChatCompletionResponse');
  e = await expectError('rate limit', 429, chat, { body: chatBody, auth: limitedKey });
  check(e?.code === 'rate_limit_exceeded', 'rate limit: code rate_limit_exceeded', e);
});

if (failures() > 0) {
  console.log(`${failures()} failure(s)`);
  process.exit(1);
}
console.log('openai schema: all checks passed');
