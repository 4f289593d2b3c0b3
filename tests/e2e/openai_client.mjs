// The official OpenAI Node client against `gpusched serve` (run by
// tests/openai_client_test.sh). Every check prints one line; any failure
// exits 1 after running the rest.
// Usage: node openai_client.mjs BASE_URL API_KEY   (BASE_URL ends in /v1)
import OpenAI from 'openai';
import { check, failures, step } from './report.mjs';

const [baseURL, apiKey] = process.argv.slice(2);
if (!baseURL || !apiKey) {
  console.error('usage: node openai_client.mjs BASE_URL API_KEY');
  process.exit(2);
}
// No retries: a failure shows as it happened.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });

function isUsage(u) {
  return (
    u != null &&
    Number.isInteger(u.prompt_tokens) &&
    Number.isInteger(u.total_tokens) &&
    u.prompt_tokens > 0
  );
}


await step('chat completion', async () => {
  const r = await client.chat.completions.create({
    model: 'chat',
    messages: [{ role: 'user', content: 'hello there' }],
    max_tokens: 4,
  });
  const content = r.choices?.[0]?.message?.content;
  check(typeof content === 'string' && content.length > 0, 'chat content', r);
  check(r.choices[0].message.role === 'assistant', 'chat role', r.choices[0]);
  check(typeof r.choices[0].finish_reason === 'string', 'chat finish_reason', r);
  check(isUsage(r.usage) && r.usage.completion_tokens === 4, 'chat usage', r.usage);
  check(r.object === 'chat.completion' && typeof r.id === 'string', 'chat object', r);
});

await step('chat completion, streamed', async () => {
  const stream = await client.chat.completions.create({
    model: 'chat',
    messages: [{ role: 'user', content: 'stream please' }],
    max_tokens: 5,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let contentChunks = 0;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    check(chunk.object === 'chat.completion.chunk', 'chunk object', chunk);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (typeof c.delta?.content === 'string' && c.delta.content.length > 0) {
        text += c.delta.content;
        contentChunks++;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(contentChunks >= 1 && text.length > 0, 'streamed content', { text, contentChunks });
  check(typeof finish === 'string', 'streamed finish_reason', finish);
  check(isUsage(usage) && usage.completion_tokens === 5, 'streamed usage', usage);
});

await step('completion (legacy)', async () => {
  const r = await client.completions.create({ model: 'chat', prompt: 'once upon', max_tokens: 3 });
  const text = r.choices?.[0]?.text;
  check(typeof text === 'string' && text.length > 0, 'completion text', r);
  check(isUsage(r.usage) && r.usage.completion_tokens === 3, 'completion usage', r.usage);
});

await step('embeddings', async () => {
  // The client asks for base64 unless told otherwise, and decodes it.
  const r = await client.embeddings.create({ model: 'embed', input: ['alpha beta', 'gamma'] });
  check(r.data?.length === 2, 'embeddings count', r.data?.length);
  const v = r.data[0].embedding;
  check(
    Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number' && Number.isFinite(x)),
    'embedding vector',
    v,
  );
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  check(Math.abs(norm - 1) < 1e-3, 'embedding is a unit vector', norm);
  check(isUsage(r.usage), 'embeddings usage', r.usage);
  const f = await client.embeddings.create({
    model: 'embed',
    input: ['alpha beta', 'gamma'],
    encoding_format: 'float',
  });
  const w = f.data[0].embedding;
  check(
    w.length === v.length && w.every((x, i) => Math.abs(x - v[i]) < 1e-6),
    'base64 and float embeddings agree',
    { base64: v.slice(0, 4), float: w.slice(0, 4) },
  );
});

await step('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  check(ids.includes('chat') && ids.includes('embed'), 'models include the deployments', ids);
});

// `call` must fail with the client's error class `type` and HTTP `status`;
// returns the error.
async function expectError(what, call, type, status) {
  try {
    await call();
  } catch (e) {
    check(e instanceof type && e.status === status, `${what}: ${type.name} (${status})`, {
      name: e?.constructor?.name,
      status: e?.status,
      message: e?.message,
    });
    return e;
  }
  check(false, `${what} was accepted`);
  return null;
}

await step('wrong key -> AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'gs-not-a-key', maxRetries: 0 });
  await expectError(
    'wrong key',
    () => bad.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'x' }] }),
    OpenAI.AuthenticationError,
    401,
  );
});

await step('unknown model -> NotFoundError', async () => {
  const e = await expectError(
    'unknown model',
    () =>
      client.chat.completions.create({
        model: 'no-such-model',
        messages: [{ role: 'user', content: 'x' }],
      }),
    OpenAI.NotFoundError,
    404,
  );
  check(/no-such-model/.test(e?.message ?? ''), 'the error names the model', e?.message);
});

if (failures() > 0) {
  console.log(`${failures()} failure(s)`);
  process.exit(1);
}
console.log('openai client: all checks passed');
