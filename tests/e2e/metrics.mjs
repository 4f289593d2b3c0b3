// GET /metrics of `gpusched serve`, parsed whole by a Prometheus text-format
// parser (parse-prometheus-text-format, a port of prom2json's parser; it
// throws on a malformed line). Run by tests/metrics_test.sh, which starts
// serve with deployments chat (SLO, min 1 max 2 replicas) and embed on a
// declared node "local" with two H100s, tenants demo and limited (1 request
// per minute, chat only). Every check prints one line on failure; exit 1
// after running them all.
// Usage: node metrics.mjs BASE_URL DEMO_KEY LIMITED_KEY ADMIN_KEY
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { check, failures } from './report.mjs';

const [base, demoKey, limitedKey, adminKey] = process.argv.slice(2);
if (!base || !demoKey || !limitedKey || !adminKey) {
  console.error('usage: node metrics.mjs BASE_URL DEMO_KEY LIMITED_KEY ADMIN_KEY');
  process.exit(2);
}


async function post(path, key, body, headers = {}) {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text };
}
const chat = (key, extra = {}, headers = {}) =>
  post('/v1/chat/completions', key,
       { model: 'chat', max_tokens: 8, messages: [{ role: 'user', content: 'hello metrics' }], ...extra },
       headers);

// --- Traffic ------------------------------------------------------------
const sent = { demoChatOk: 0, embedOk: 0 };
for (let i = 0; i < 3; i++) {
  const r = await chat(demoKey);
  check(r.status === 200, 'chat answered 200', r);
  if (r.status === 200) sent.demoChatOk++;
}
{
  const r = await chat(demoKey, { stream: true, max_tokens: 6 });
  check(r.status === 200 && r.text.includes('data: '), 'streamed chat answered', r.status);
  if (r.status === 200) sent.demoChatOk++;
}
for (let i = 0; i < 2; i++) {
  const r = await post('/v1/embeddings', demoKey, { model: 'embed', input: 'embed me' });
  check(r.status === 200, 'embedding answered 200', r);
  if (r.status === 200) sent.embedOk++;
}
{
  const r = await chat(demoKey, {}, { 'X-Gpusched-Priority': 'no-such-class' });
  check(r.status === 400, 'unknown priority class answered 400', r);
}
const limitedStatus = [];
for (let i = 0; i < 3; i++) limitedStatus.push((await chat(limitedKey)).status);
check(JSON.stringify(limitedStatus) === '[200,429,429]', 'rate limit: 1 per minute', limitedStatus);
{
  const res = await fetch(`${base}/api/v1/deployments/chat/scale`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${adminKey}` },
    body: JSON.stringify({ replicas: 2 }),
  });
  check(res.status === 200, 'scale chat to 2', res.status);
}
// GPU time accrues every second, engine metrics are read every 500 ms.
await new Promise((r) => setTimeout(r, 2500));

// --- Parse ----------------------------------------------------------------
const res = await fetch(`${base}/metrics`);
check(res.status === 200, 'GET /metrics without a key answers 200', res.status);
check((res.headers.get('content-type') || '').startsWith('text/plain; version=0.0.4'),
      'content type is the text format 0.0.4', res.headers.get('content-type'));
const text = await res.text();
if (process.env.METRICS_DUMP) (await import("node:fs")).writeFileSync(process.env.METRICS_DUMP, text);
let families = [];
try {
  families = parsePrometheusTextFormat(text);
} catch (e) {
  check(false, 'the exposition parses', e.message);
}
const byName = new Map(families.map((f) => [f.name, f]));
// The parser keeps a histogram's buckets but folds its labelled series
// together (prom2json's flattening) and drops their _sum and _count; the
// sample lines alone, without HELP and TYPE, parse as untyped families
// (NAME_bucket, NAME_sum, NAME_count) that keep every label; they check
// the histograms.
let raw = new Map();
try {
  const lines = text.split('\n').filter((l) => !l.startsWith('#')).join('\n');
  // A name recurs once per label set (bucket, sum, count, next set): merge.
  for (const f of parsePrometheusTextFormat(lines)) {
    if (raw.has(f.name)) raw.get(f.name).metrics.push(...f.metrics);
    else raw.set(f.name, f);
  }
} catch (e) {
  check(false, 'the sample lines parse', e.message);
}
check(families.length > 0 && byName.size === families.length, 'families parsed, each once',
      families.length);

// Every family: HELP and TYPE, our prefix, counters _total, histograms _seconds.
for (const f of families) {
  check(f.name.startsWith('gpusched_'), `${f.name}: gpusched_ prefix`);
  check(typeof f.help === 'string' && f.help.length > 0, `${f.name}: has HELP`);
  check(['COUNTER', 'GAUGE', 'HISTOGRAM'].includes(f.type), `${f.name}: has TYPE`, f.type);
  if (f.type === 'COUNTER') check(f.name.endsWith('_total'), `${f.name}: counter ends in _total`);
  if (f.type === 'HISTOGRAM') check(f.name.endsWith('_seconds'), `${f.name}: histogram in _seconds`);
}
// Every family's HELP and TYPE line is in the text itself (not defaulted).
for (const f of families) {
  check(text.includes(`# HELP ${f.name} `) && text.includes(`# TYPE ${f.name} `),
        `${f.name}: HELP and TYPE lines`);
}

const expected = {
  gpusched_requests_total: 'COUNTER',
  gpusched_request_rejections_total: 'COUNTER',
  gpusched_tenant_throttled_requests_total: 'COUNTER',
  gpusched_invalid_requests_total: 'COUNTER',
  gpusched_input_tokens_total: 'COUNTER',
  gpusched_output_tokens_total: 'COUNTER',
  gpusched_slo_requests_total: 'COUNTER',
  gpusched_slo_met_requests_total: 'COUNTER',
  gpusched_time_to_first_token_seconds: 'HISTOGRAM',
  gpusched_time_per_output_token_seconds: 'HISTOGRAM',
  gpusched_request_duration_seconds: 'HISTOGRAM',
  gpusched_replica_starts_total: 'COUNTER',
  gpusched_replica_startup_seconds: 'HISTOGRAM',
  gpusched_prefix_cache_queries_total: 'COUNTER',
  gpusched_prefix_cache_hits_total: 'COUNTER',
  gpusched_placement_attempts_total: 'COUNTER',
  gpusched_placement_duration_seconds: 'HISTOGRAM',
  gpusched_unschedulable_total: 'COUNTER',
  gpusched_preemptions_total: 'COUNTER',
  gpusched_evictions_total: 'COUNTER',
  gpusched_scale_decisions_total: 'COUNTER',
  gpusched_deployment_gpu_seconds_total: 'COUNTER',
  gpusched_deployment_cost_total: 'COUNTER',
  gpusched_tenant_gpu_seconds_total: 'COUNTER',
  gpusched_tenant_cost_total: 'COUNTER',
  gpusched_deployment_replicas: 'GAUGE',
  gpusched_deployment_replicas_desired: 'GAUGE',
  gpusched_queue_depth: 'GAUGE',
  gpusched_requests_in_flight: 'GAUGE',
  gpusched_engine_running_requests: 'GAUGE',
  gpusched_engine_waiting_requests: 'GAUGE',
  gpusched_engine_kv_cache_usage_ratio: 'GAUGE',
  gpusched_prefix_cache_hit_ratio: 'GAUGE',
  gpusched_gpu_info: 'GAUGE',
  gpusched_gpu_memory_total_bytes: 'GAUGE',
  gpusched_gpu_memory_used_bytes: 'GAUGE',
  gpusched_gpu_utilization_ratio: 'GAUGE',
  gpusched_gpu_allocated_milli: 'GAUGE',
  gpusched_gpu_healthy: 'GAUGE',
  // What the alerting rules need (deploy/prometheus/, docs/runbooks.md).
  gpusched_replica_failures_total: 'COUNTER',
  gpusched_controller_last_pass_timestamp_seconds: 'GAUGE',
  gpusched_queue_limit: 'GAUGE',
  gpusched_node_usable: 'GAUGE',
  gpusched_node_replicas: 'GAUGE',
  gpusched_tenant_gpu_quota: 'GAUGE',
  gpusched_tenant_gpu_limit: 'GAUGE',
  gpusched_tenant_gpus_allocated: 'GAUGE',
};
for (const [name, type] of Object.entries(expected)) {
  const f = byName.get(name);
  check(f !== undefined, `family ${name} exists`);
  if (f) check(f.type === type, `${name} is a ${type}`, f.type);
}

// --- Values ---------------------------------------------------------------
// Sum of the samples of `name` whose labels include `match`.
function sum(name, match = {}) {
  const histogram = byName.get(name)?.type === 'HISTOGRAM';
  const f = histogram ? raw.get(`${name}_count`) : byName.get(name);
  if (!f) return NaN;
  let total = 0;
  for (const m of f.metrics) {
    const labels = m.labels || {};
    if (Object.entries(match).every(([k, v]) => labels[k] === v)) {
      total += Number(m.value);
    }
  }
  return total;
}
const eq = (name, match, want) => {
  const got = sum(name, match);
  check(got === want, `${name}${JSON.stringify(match)} == ${want}`, got);
};
const gt0 = (name, match) => {
  const got = sum(name, match);
  check(got > 0, `${name}${JSON.stringify(match)} > 0`, got);
};

eq('gpusched_requests_total', { deployment: 'chat', tenant: 'demo', outcome: 'ok' }, sent.demoChatOk);
eq('gpusched_requests_total', { deployment: 'embed', tenant: 'demo', outcome: 'ok' }, sent.embedOk);
eq('gpusched_requests_total', { deployment: 'chat', tenant: 'limited', outcome: 'ok' }, 1);
eq('gpusched_requests_total', { deployment: 'chat', tenant: 'limited', outcome: 'rejected' }, 2);
eq('gpusched_requests_total', { outcome: 'error' }, 0);
eq('gpusched_requests_total', { deployment: 'chat', tenant: 'demo', class: 'standard' }, sent.demoChatOk);
eq('gpusched_request_rejections_total', { deployment: 'chat', reason: 'rate_limited_requests' }, 2);
eq('gpusched_request_rejections_total', { deployment: 'embed' }, 0);
eq('gpusched_tenant_throttled_requests_total', { tenant: 'limited' }, 2);
eq('gpusched_invalid_requests_total', { reason: 'unknown_priority' }, 1);
gt0('gpusched_input_tokens_total', { deployment: 'chat', tenant: 'demo' });
gt0('gpusched_input_tokens_total', { deployment: 'embed', tenant: 'demo' });
gt0('gpusched_output_tokens_total', { deployment: 'chat', tenant: 'demo' });
const chatFinished = sent.demoChatOk + 1;
eq('gpusched_time_to_first_token_seconds', { deployment: 'chat' }, chatFinished);
eq('gpusched_request_duration_seconds', { deployment: 'chat' }, chatFinished);
eq('gpusched_request_duration_seconds', { deployment: 'embed' }, sent.embedOk);
eq('gpusched_time_per_output_token_seconds', { deployment: 'chat' }, 1);  // the stream
eq('gpusched_slo_requests_total', { deployment: 'chat' }, chatFinished);
eq('gpusched_slo_requests_total', { deployment: 'chat', tenant: 'demo' }, sent.demoChatOk);
{
  // The control loop's heartbeat is recent (it passes every 50 ms or sooner).
  const lastPass = sum('gpusched_controller_last_pass_timestamp_seconds', {});
  check(Math.abs(Date.now() / 1000 - lastPass) < 120, 'the control loop passed in the last 2 minutes', lastPass);
}
eq('gpusched_node_usable', { node: 'local' }, 1);
check(sum('gpusched_node_replicas', { node: 'local' }) >= 2, 'node local holds the replicas',
      sum('gpusched_node_replicas', { node: 'local' }));
eq('gpusched_slo_met_requests_total', { deployment: 'chat' }, chatFinished);
check(!byName.get('gpusched_slo_requests_total')?.metrics.some((m) => m.labels?.deployment === 'embed'),
      'no SLO series for a deployment without an SLO');
eq('gpusched_scale_decisions_total', { deployment: 'chat', direction: 'up' }, 1);
eq('gpusched_deployment_replicas_desired', { deployment: 'chat' }, 2);
eq('gpusched_deployment_replicas_desired', { deployment: 'embed' }, 1);
check(sum('gpusched_deployment_replicas', { deployment: 'chat' }) === 2,
      'chat has 2 replicas in some state', sum('gpusched_deployment_replicas', { deployment: 'chat' }));
eq('gpusched_deployment_replicas', { deployment: 'embed', state: 'ready' }, 1);
check(sum('gpusched_replica_starts_total', { deployment: 'chat' }) >= 2, 'chat: 2 replica starts');
eq('gpusched_replica_starts_total', { deployment: 'embed' }, 1);
eq('gpusched_replica_startup_seconds', { deployment: 'embed' }, 1);
check(sum('gpusched_placement_attempts_total', { result: 'placed' }) >= 3, 'placements counted',
      sum('gpusched_placement_attempts_total', { result: 'placed' }));
check(sum('gpusched_placement_duration_seconds') === sum('gpusched_placement_attempts_total'),
      'one placement latency per attempt');
eq('gpusched_preemptions_total', {}, 0);
eq('gpusched_evictions_total', {}, 0);
eq('gpusched_queue_depth', {}, 0);
eq('gpusched_requests_in_flight', {}, 0);
eq('gpusched_engine_running_requests', { deployment: 'embed' }, 0);
check(byName.get('gpusched_engine_running_requests')?.metrics.some((m) => m.labels?.deployment === 'chat'),
      'batch size of chat replicas reported');
gt0('gpusched_prefix_cache_queries_total', { deployment: 'chat' });
gt0('gpusched_deployment_gpu_seconds_total', { deployment: 'chat' });
gt0('gpusched_deployment_cost_total', { deployment: 'chat' });
gt0('gpusched_tenant_gpu_seconds_total', { tenant: 'demo' });
gt0('gpusched_tenant_cost_total', { tenant: 'demo' });
check(sum('gpusched_tenant_gpu_seconds_total') <= sum('gpusched_deployment_gpu_seconds_total') + 1e-9,
      'tenants are charged at most the deployments\' GPU-seconds');
// Cost = GPU-seconds * 3.6 / 3600 (all replicas on H100-SXM-80GB).
{
  const gs = sum('gpusched_deployment_gpu_seconds_total', { deployment: 'chat' });
  const cost = sum('gpusched_deployment_cost_total', { deployment: 'chat' });
  check(Math.abs(cost - gs * 0.001) < 1e-9, 'cost = GPU-seconds x price per GPU-hour / 3600', { gs, cost });
}
// GPUs: two declared H100s; at least chat and embed (250 milli each) placed.
eq('gpusched_gpu_info', { node: 'local', model: 'H100-SXM-80GB', simulated: 'true' }, 2);
eq('gpusched_gpu_healthy', { node: 'local' }, 2);
check(sum('gpusched_gpu_allocated_milli') >= 500, 'allocated milli', sum('gpusched_gpu_allocated_milli'));
eq('gpusched_gpu_memory_total_bytes', { node: 'local', gpu: '0' }, 81559 * 1024 * 1024);
check(sum('gpusched_gpu_memory_used_bytes', { source: 'allocation' }) >= 20 * 1024 ** 3,
      'allocated memory', sum('gpusched_gpu_memory_used_bytes', { source: 'allocation' }));
check(byName.get('gpusched_gpu_utilization_ratio')?.metrics.every((m) => m.labels.source === 'allocation'),
      'without NVML, utilization comes from the allocation');

// Histograms: per label set, buckets in ascending le order and cumulative,
// ending in +Inf, which equals _count; a _sum for each.
for (const f of families.filter((f) => f.type === 'HISTOGRAM')) {
  const series = new Map();  // labels without le -> [[le, value]]
  for (const m of raw.get(`${f.name}_bucket`)?.metrics || []) {
    const { le, ...rest } = m.labels;
    const key = JSON.stringify(rest);
    if (!series.has(key)) series.set(key, []);
    series.get(key).push([le, Number(m.value)]);
  }
  for (const [key, buckets] of series) {
    const where = `${f.name}${key}`;
    check(buckets[buckets.length - 1][0] === '+Inf', `${where}: ends with le="+Inf"`);
    for (let i = 1; i < buckets.length; i++) {
      const [le0, v0] = buckets[i - 1], [le1, v1] = buckets[i];
      check(le1 === '+Inf' || Number(le1) > Number(le0), `${where}: le ascending at ${le1}`);
      check(v1 >= v0, `${where}: buckets cumulative at le=${le1}`, [v0, v1]);
    }
    const count = raw.get(`${f.name}_count`)?.metrics.find((m) => JSON.stringify(m.labels || {}) === key);
    const total = raw.get(`${f.name}_sum`)?.metrics.find((m) => JSON.stringify(m.labels || {}) === key);
    check(count && Number(count.value) === buckets[buckets.length - 1][1], `${where}: +Inf == _count`);
    check(total && Number(total.value) >= 0, `${where}: _sum >= 0`);
  }
  check(series.size === (raw.get(`${f.name}_count`)?.metrics.length || 0),
        `${f.name}: one _count per bucket series`);
}

// Labels: values only from the bounded sets the platform defines.
const allowed = {
  deployment: ['chat', 'embed'],
  tenant: ['demo', 'limited'],
  class: ['critical', 'standard', 'batch', 'sheddable'],
  outcome: ['ok', 'error', 'rejected'],
  node: ['local'],
  gpu: ['0', '1'],
  source: ['allocation', 'nvml'],
  direction: ['up', 'down'],
  result: ['placed', 'unschedulable'],
  replica: ['chat-0', 'chat-1', 'embed-0'],
  model: ['H100-SXM-80GB'],
  simulated: ['true', 'false'],
  reason: ['rate_limited_requests', 'rate_limited_tokens', 'model_queue_full', 'tenant_queue_full',
           'deadline_infeasible', 'queue_timeout', 'prompt_too_long', 'no_replica', 'tenant_concurrency_limit',
           'unauthenticated', 'forbidden', 'unknown_model', 'unknown_priority', 'bad_deadline',
           'exited', 'failed', 'unhealthy'],  // gpusched_replica_failures_total
  state: ['pending', 'starting', 'ready', 'unhealthy', 'backoff', 'draining', 'external'],
  change: ['elected', 'lost'],
  store: ['sqlite', 'etcd'],
};
let series = 0;
for (const f of families) {
  for (const m of f.metrics) {
    series++;
    for (const [k, v] of Object.entries(m.labels || {})) {
      if (k === 'plugin') continue;  // placement plugins: none here
      check(allowed[k]?.includes(v), `${f.name}: label ${k}="${v}" is from a bounded set`);
    }
  }
}
check(series < 2000, 'series bounded', series);

console.log(`metrics: ${families.length} families, ${series} series, ${failures()} failures`);
process.exit(failures() ? 1 : 0);
