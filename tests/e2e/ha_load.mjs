// Load through a load balancer with the official OpenAI Node client, for
// tests/ha_lb_test.sh: WORKERS loops, each sending chat completions for
// SECONDS, every other one streamed, and counting what the client saw.
// Prints one JSON summary: requests, ok, failed, the failed ones (when,
// streamed or not, whether their response had begun, the error), and the
// streamed ones that ended before [DONE] or with too few tokens.
// Usage: node ha_load.mjs BASE_URL API_KEY SECONDS WORKERS RETRIES [MODEL]
//   RETRIES: "default" (the client's own: 2 retries) or a number.
import OpenAI from 'openai';

const [baseURL, apiKey, seconds, workers, retries, model = 'chat'] =
  process.argv.slice(2);
if (!baseURL || !apiKey || !seconds || !workers || !retries) {
  console.error('usage: node ha_load.mjs BASE_URL API_KEY SECONDS WORKERS RETRIES [MODEL]');
  process.exit(2);
}
const options = { baseURL, apiKey, timeout: 60_000 };
if (retries !== 'default') options.maxRetries = Number(retries);
const client = new OpenAI(options);

const tokens = 24;
const end = Date.now() + Number(seconds) * 1000;
const summary = { requests: 0, ok: 0, failed: 0, streamed: 0, failures: [] };

async function one(k, streamed) {
  const started = Date.now();
  let begun = false;
  try {
    const body = {
      model,
      messages: [{ role: 'user', content: `request ${k}: count for me` }],
      max_tokens: tokens,
    };
    if (streamed) {
      const stream = await client.chat.completions.create({ ...body, stream: true });
      let chunks = 0;
      let finish = null;
      for await (const chunk of stream) {
        begun = true;
        for (const c of chunk.choices) {
          if (typeof c.delta?.content === 'string' && c.delta.content.length > 0) chunks++;
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
      if (finish === null || chunks < tokens) {
        throw new Error(`stream ended early: ${chunks} tokens, finish ${finish}`);
      }
    } else {
      const r = await client.chat.completions.create(body);
      if (r.usage?.completion_tokens !== tokens) {
        throw new Error(`completion of ${r.usage?.completion_tokens} tokens`);
      }
    }
    summary.ok++;
  } catch (e) {
    summary.failed++;
    summary.failures.push({
      at: new Date(started).toISOString(),
      seconds: (Date.now() - started) / 1000,
      streamed,
      begun,
      error: String(e?.message ?? e).slice(0, 300),
    });
  }
}

async function worker(w) {
  let k = 0;
  while (Date.now() < end) {
    const streamed = (k + w) % 2 === 0;
    summary.requests++;
    if (streamed) summary.streamed++;
    await one(`${w}-${k}`, streamed);
    k++;
  }
}

await Promise.all(Array.from({ length: Number(workers) }, (_, w) => worker(w)));
console.log(JSON.stringify(summary));
