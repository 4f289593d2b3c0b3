// The dashboard in a real browser (run by tests/dashboard_test.sh):
// playwright-core drives Debian's chromium headless against `gpusched
// serve`. Every check prints one line; any failure exits 1 after the rest
// ran (a screenshot is saved either way).
// Usage: node dashboard.mjs URL ADMIN_KEY TENANT_KEY CHROMIUM SCREENSHOT
import { chromium } from 'playwright-core';
import { failures, step } from './report.mjs';

const [url, admin, tenantKey, executablePath, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error('usage: node dashboard.mjs URL ADMIN_KEY TENANT_KEY CHROMIUM SCREENSHOT');
  process.exit(2);
}

function assert(ok, what) {
  if (!ok) throw new Error(what);
}
async function api(method, path, body) {
  const res = await fetch(url + '/api/v1' + path, {
    method,
    headers: { Authorization: `Bearer ${admin}` },
    body,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

// The replicas each GPU holds, as the API says and as the page draws them:
// {"node/index": "replica@deployment,..."}.
async function apiMap() {
  const out = {};
  for (const g of (await api('GET', '/gpus')).items) {
    out[`${g.node}/${g.index}`] = g.replicas.map((r) => `${r.name}@${r.deployment}`).sort().join(',');
  }
  return out;
}
function pageMap(page) {
  return page.$$eval('[data-gpu]', (boxes) => {
    const out = {};
    for (const b of boxes) {
      const compute = b.querySelector('.bar');  // the first bar: compute shares
      out[b.dataset.gpu] = [...compute.querySelectorAll('[data-replica]')]
        .map((s) => `${s.dataset.replica}@${s.dataset.deployment}`).sort().join(',');
    }
    return out;
  });
}
const same = (a, b) => JSON.stringify(a, Object.keys(a).sort()) === JSON.stringify(b, Object.keys(b).sort());

const browser = await chromium.launch({
  executablePath,
  headless: true,
  // As root (CI containers) chromium needs --no-sandbox.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });

// Traffic for the charts: `concurrency` loops of chat requests (streamed and
// not) with the tenant key until stopped.
let traffic = true;
let sent = 0;
async function loop(i) {
  while (traffic) {
    const stream = (sent + i) % 2 === 0;
    try {
      const res = await fetch(url + '/v1/chat/completions', {
        method: 'POST',
        headers: { Authorization: `Bearer ${tenantKey}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'chat', stream, max_tokens: 8,
          messages: [{ role: 'user', content: `hello ${sent}` }] }),
      });
      await res.text();
      sent++;
    } catch (e) {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

try {
  await step('the key form appears without a key', async () => {
    await page.goto(url + '/');
    await page.waitForSelector('#login:not([hidden])', { timeout: 10_000 });
    await page.fill('#key-input', 'gs-not-a-key');
    await page.click('#login-form button');
    await page.waitForFunction(() => document.querySelector('#login-error').textContent.length > 0,
      null, { timeout: 10_000 });
  });

  await step('opens with ?key= (then drops it from the address)', async () => {
    await page.goto(`${url}/?key=${encodeURIComponent(admin)}`);
    await page.waitForSelector('#main:not([hidden]) [data-gpu]', { timeout: 15_000 });
    assert(!page.url().includes('key='), `the key is still in the address: ${page.url()}`);
  });

  await step('the GPU map shows every replica on the GPUs /api/v1/gpus names', async () => {
    const want = await apiMap();
    assert(Object.values(want).filter(Boolean).length > 0, `nothing placed: ${JSON.stringify(want)}`);
    let got = {};
    for (let i = 0; i < 30; i++) {
      got = await pageMap(page);
      if (same(got, want)) break;
      await page.waitForTimeout(200);
    }
    assert(same(got, want), `page ${JSON.stringify(got)} != api ${JSON.stringify(want)}`);
    const nodes = await page.$$eval('[data-node]', (n) => n.map((x) => x.dataset.node));
    assert(nodes.join() === 'node-a,node-b', `nodes: ${nodes}`);
  });

  await step('segments are drawn to scale (a 300m share is 30% of its bar)', async () => {
    // Looked up and measured in one task: the map is redrawn every refresh, and a
    // segment found in one task may be detached (0 wide) by the next.
    const measure = () => page.evaluate(() => {
      const s = document.querySelector('[data-gpu] .bar [data-deployment="chat"]');
      if (!s) return null;
      const bar = s.parentElement.getBoundingClientRect().width;
      return bar > 0 ? s.getBoundingClientRect().width / bar : null;
    });
    let ratio = null;
    for (let i = 0; i < 50 && ratio === null; i++) {
      ratio = await measure();
      if (ratio === null) await page.waitForTimeout(100);
    }
    assert(ratio !== null && Math.abs(ratio - 0.3) < 0.02, `ratio ${ratio}`);
  });

  await step('deployments and tenants are listed', async () => {
    const deps = await page.$$eval('#deployments tbody tr[data-deployment]', (r) => r.map((x) => x.dataset.deployment));
    assert(deps.join() === 'chat,embed', `deployments: ${deps}`);
    const ready = await page.$$eval('#deployments [data-state="ready"]', (c) => c.length);
    assert(ready === 3, `ready replica chips: ${ready}`);
    const tenants = await page.$$eval('#tenants tbody tr[data-tenant]', (r) => r.map((x) => x.dataset.tenant));
    assert(tenants.join() === 'demo,team2', `tenants: ${tenants}`);
    const quota = await page.textContent('#tenants tr[data-tenant="team2"]');
    assert(quota.includes('1 guaranteed') && quota.includes('6,000 req/min'), `team2 row: ${quota}`);
  });

  await step('the alerts card says when no Prometheus is configured', async () => {
    await page.waitForFunction(() => document.querySelector('#alerts li') !== null, null, { timeout: 15_000 });
    const text = await page.textContent('#alerts');
    assert(text.includes('alerts.prometheus_url is not set'), `alerts card: ${text}`);
  });

  await step('the charts and counters move while traffic flows', async () => {
    const before = Number(await page.getAttribute('#chart-rps', 'data-points'));
    const loops = [0, 1, 2, 3].map(loop);
    await page.waitForFunction(() => {
      const rps = document.querySelector('#chart-rps');
      const done = document.querySelector('#deployments tr[data-deployment="chat"] .done');
      return Number(rps.dataset.last) > 0 && Number(done.textContent.replace(/,/g, '')) > 0 &&
        Number(document.querySelector('#chart-ttft').dataset.last) > 0;
    }, null, { timeout: 20_000 });
    const after = Number(await page.getAttribute('#chart-rps', 'data-points'));
    assert(after > before, `chart points ${before} -> ${after}`);
    const canvases = await page.$$eval('.chart canvas', (c) => c.length);
    assert(canvases === 4, `uPlot canvases: ${canvases}`);
    const tenantRequests = await page.textContent('#tenants tr[data-tenant="demo"] td:nth-child(7)');
    assert(Number(tenantRequests.replace(/,/g, '')) > 0, `demo requests: ${tenantRequests}`);
    await page.waitForTimeout(2500);  // a few more points for the screenshot
    traffic = false;
    await Promise.all(loops);
    console.log(`   (${sent} requests sent)`);
  });

  await step('an applied deployment shows in the events feed and on the map', async () => {
    await api('POST', '/apply', [
      'apiVersion: gpusched.io/v1', 'kind: Deployment', 'metadata: {name: summarize}', 'spec:',
      '  engine: {template: reference, args: ["--hidden", "8"]}',
      '  resources: {fraction: {milli: 500, memory: 12Gi}, gpuModels: [L4-24GB]}', ''].join('\n'));
    await page.waitForSelector('#events li[data-kind="deployment.created"]:has-text("summarize"), ' +
      '#events li[data-kind="deployment.created"] .event-dep:text("summarize")', { timeout: 15_000 });
    await page.waitForSelector('#events li[data-kind="replica.placed"]:has-text("summarize")', { timeout: 15_000 });
    await page.waitForSelector('[data-gpu="node-b/0"] [data-deployment="summarize"]', { timeout: 15_000 });
    // Newest on top.
    const kinds = await page.$$eval('#events li[data-kind]', (l) => l.map((x) => x.dataset.kind));
    const placed = kinds.indexOf('replica.placed');
    assert(placed >= 0 && placed < kinds.lastIndexOf('server.started'), `order: ${kinds}`);
    // The kind filter keeps only that kind.
    await page.selectOption('#event-kind', 'replica.placed');
    const filtered = await page.$$eval('#events li[data-kind]', (l) => [...new Set(l.map((x) => x.dataset.kind))]);
    assert(filtered.join() === 'replica.placed', `filtered: ${filtered}`);
    await page.selectOption('#event-kind', '');
    await page.waitForSelector('#deployments [data-replica="summarize-0"][data-state="ready"]', { timeout: 20_000 });
    assert(same(await pageMap(page), await apiMap()), 'map and API differ after the apply');
  });

  await step('the model routes panel shows an applied route\'s weight split', async () => {
    const none = await page.textContent('#routes tbody');
    assert(/no routes/i.test(none), `routes before any is applied: ${none}`);
    await api('POST', '/apply', [
      'apiVersion: gpusched.io/v1', 'kind: ModelRoute', 'metadata: {name: assistant}', 'spec:',
      '  sticky: session',
      '  targets: [{deployment: chat, version: "1", weight: 70}, {deployment: embed, version: "2", weight: 30}]',
      ''].join('\n'));
    await page.waitForSelector('#routes tr[data-route="assistant"] .seg[data-deployment="embed"]', { timeout: 15_000 });
    const segs = await page.$$eval('#routes tr[data-route="assistant"] .seg',
      (s) => s.map((x) => `${x.dataset.version}:${x.dataset.deployment}:${x.dataset.weight}`));
    assert(segs.join() === '1:chat:70,2:embed:30', `segments: ${segs}`);
    const row = await page.textContent('#routes tr[data-route="assistant"]');
    assert(row.includes('1 (chat) 70%') && row.includes('session') && row.includes('none'), `route row: ${row}`);
  });

  await step('no script errors', async () => {
    assert(errors.filter((e) => !/401/.test(e)).length === 0, errors.join(' | '));
  });
} finally {
  traffic = false;
  await page.waitForTimeout(1200);  // one more refresh
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`screenshot: ${screenshot}`);
  await browser.close();
}
process.exit(failures() ? 1 : 0);
