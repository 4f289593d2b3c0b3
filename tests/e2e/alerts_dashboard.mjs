// The dashboard's alerts card in a real browser (run by
// tests/alerts_live_test.sh while its alerts fire): playwright-core drives
// Debian's chromium headless against `gpusched serve` configured with
// alerts.prometheus_url. Every alert name given must show, with its
// severity and a runbook link to its docs/runbooks.md section.
// Usage: node alerts_dashboard.mjs URL ADMIN_KEY CHROMIUM ALERTNAME...
import { chromium } from 'playwright-core';
import { failures, step } from './report.mjs';

const [url, admin, executablePath, ...names] = process.argv.slice(2);
if (names.length === 0) {
  console.error('usage: node alerts_dashboard.mjs URL ADMIN_KEY CHROMIUM ALERTNAME...');
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
try {
  await page.goto(`${url}/?key=${encodeURIComponent(admin)}`);
  for (const name of names) {
    await step(`the alerts card shows ${name} with its runbook`, async () => {
      const sel = `#alerts li[data-alert="${name}"]`;
      await page.waitForSelector(sel, { timeout: 20_000 });
      const href = await page.getAttribute(`${sel} a.alert-runbook`, 'href');
      const want = `docs/runbooks.md#${name.toLowerCase()}`;
      if (!href || !href.endsWith(want)) throw new Error(`runbook link ${href}, want ...${want}`);
      const cls = await page.getAttribute(sel, 'class');
      if (!/sev-(critical|warning|info)/.test(cls)) throw new Error(`severity class: ${cls}`);
    });
  }
} finally {
  await browser.close();
}
process.exit(failures() ? 1 : 0);
