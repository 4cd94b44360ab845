// Loads one of motley's HTML reports in headless Chromium (Debian's, driven by playwright-core)
// and checks what a reader relies on: no console error, no request beyond the file itself, the
// sections there, the timeline rows in replica-then-stage order, hover, zoom and pan working;
// then takes a full-page screenshot.
// Usage: node check.mjs PAGE.html SCREENSHOT.png [--measured] [--strategies] [--folded] [--cost]
//        [--not-device-order]
import { chromium } from 'playwright-core';
import path from 'node:path';

const [pagePath, shotPath, ...flags] = process.argv.slice(2);
if (!pagePath || !shotPath) {
  console.error('usage: node check.mjs PAGE.html SCREENSHOT.png [flags]');
  process.exit(2);
}
const want = new Set(flags);
const url = 'file://' + path.resolve(pagePath);
const failures = [];
const fail = (what) => failures.push(what);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    if (r.url() !== url && !r.url().startsWith('data:')) problems.push(`request for ${r.url()}`);
  });
  // The page's script runs synchronously before the load event, which goto waits for.
  await page.goto(url);
  const ready = await page.evaluate(() => document.body.getAttribute('data-ready') === 'true');
  if (!ready) {
    console.error(`${pagePath}:\n  the page's script did not finish drawing\n  ` + problems.join('\n  '));
    process.exitCode = 1;
    throw new Error('not drawn');
  }
  const data = await page.evaluate(() => JSON.parse(document.getElementById('motley-data').textContent));

  for (const selector of ['#summary', '#timeline-svg', '#layout svg.replica-layout', '#device-table tbody tr',
    'footer']) {
    if ((await page.locator(selector).count()) === 0) fail(`no element matches ${selector}`);
  }

  // Rows: one <g class="row"> per data row, in the data's order, simulated rows by replica then stage.
  const rows = await page.$$eval('#timeline-svg g.row', (gs) => gs.map((g) => ({
    replica: Number(g.getAttribute('data-replica')),
    stage: Number(g.getAttribute('data-stage')),
    group: Number(g.getAttribute('data-group')),
    source: g.getAttribute('data-source'),
  })));
  if (rows.length !== data.timeline.rows.length) {
    fail(`${rows.length} timeline rows drawn, the data has ${data.timeline.rows.length}`);
  }
  const simulated = rows.filter((r) => r.source === 'simulated' && r.replica >= 0);
  for (let i = 1; i < simulated.length; ++i) {
    const a = simulated[i - 1], b = simulated[i];
    if (b.replica < a.replica || (b.replica === a.replica && b.stage < a.stage)) {
      fail(`timeline row ${i} (replica ${b.replica}, stage ${b.stage}) comes after replica ${a.replica}, stage ${a.stage}`);
    }
  }
  if (want.has('--not-device-order')) {
    // The case is one whose pipeline order differs from device-id order, so the check above means
    // something: the first device of each drawn row must not be increasing throughout.
    const firsts = data.timeline.rows.filter((r) => r.source === 'simulated' && r.devices)
      .map((r) => Number(String(r.devices).split(/[-,]/)[0]));
    const sorted = firsts.every((d, i) => i === 0 || d >= firsts[i - 1]);
    if (sorted) fail(`rows are in device-id order (${firsts.join(' ')}); this case should not be`);
  }
  const measured = rows.filter((r) => r.source === 'measured');
  if (want.has('--measured')) {
    if (measured.length === 0) fail('no measured rows');
    rows.forEach((r, i) => {
      if (r.source !== 'measured') return;
      const before = rows[i - 1];
      if (!before || before.source !== 'simulated' || before.replica !== r.replica || before.group !== r.group) {
        fail(`measured row ${i} (replica ${r.replica}, group ${r.group}) is not under its simulated row`);
      }
    });
    const labels = await page.$$eval('#timeline-svg g.labels text', (ts) => ts.map((t) => t.textContent));
    if (!labels.some((t) => /measured \(sim [+-]\d+\.\d%\)/.test(t))) fail('no measured row states its error');
    if ((await page.locator('#card-measured').count()) === 0) fail('no measured iteration card');
  } else if (measured.length > 0) {
    fail('measured rows without a trace');
  }

  // Hover: the first compute box shows its action.
  const box = page.locator('#timeline-svg rect.box').first();
  await box.hover();
  const tip = await page.locator('#tooltip').evaluate((t) => ({ shown: getComputedStyle(t).display !== 'none',
    text: t.textContent }));
  if (!tip.shown || !/start .+ duration /.test(tip.text) || !/(stage \d+|optimizer)/.test(tip.text)) {
    fail(`hovering a box shows ${JSON.stringify(tip)}`);
  }

  // Zoom with the wheel over the plot, pan by dragging, reset with a double click.
  const svg = page.locator('#timeline-svg');
  const view = async () => svg.evaluate((s) => [Number(s.getAttribute('data-view-start-us')),
    Number(s.getAttribute('data-view-end-us'))]);
  const [s0, e0] = await view();
  const bounds = await svg.boundingBox();
  const cx = bounds.x + bounds.width * 0.6, cy = bounds.y + 30;
  await page.mouse.move(cx, cy);
  await page.mouse.wheel(0, -600);
  await page.waitForTimeout(50);
  const [s1, e1] = await view();
  if (!(e1 - s1 < (e0 - s0) * 0.9)) fail(`the wheel did not zoom in: ${s0}-${e0} -> ${s1}-${e1}`);
  await page.mouse.move(cx, cy);
  await page.mouse.down();
  await page.mouse.move(cx + 200, cy, { steps: 4 });
  await page.mouse.up();
  const [s2, e2] = await view();
  if (!(s2 < s1) || Math.abs((e2 - s2) - (e1 - s1)) > 1e-6 * (e1 - s1) + 1e-9) {
    fail(`dragging did not pan: ${s1}-${e1} -> ${s2}-${e2}`);
  }
  await svg.dblclick({ position: { x: bounds.width * 0.5, y: 30 } });
  const [s3, e3] = await view();
  if (s3 !== 0 || Math.abs(e3 - data.timeline.span_us) > 1e-6 * data.timeline.span_us) {
    fail(`double-click did not reset the view: ${s3}-${e3}`);
  }

  if (want.has('--strategies')) {
    const bars = await page.locator('#strategy-bars g.strategy').count();
    if (!data.strategies || bars !== data.strategies.length) fail(`${bars} strategy bars for ${data.strategies?.length}`);
    if ((await page.locator('#bound-line').count()) === 0) fail('no lower-bound line in the strategies');
    if ((await page.locator('#strategy-table tbody tr').count()) !== data.strategies.length) fail('strategy table rows');
  }
  if (want.has('--folded')) {
    if ((await page.locator('#folds').count()) === 0) fail('no note of the folded replicas');
    if (data.folds.length === 0) fail('nothing folded');
  }
  if (want.has('--cost')) {
    if ((await page.locator('#cost .card').count()) === 0) fail('no cost section');
  }
  if ((await page.locator('#layout g.link.slowest').count()) === 0 && data.layout.replicas.some((r) => r.links.length > 0)) {
    fail('the slowest link is not marked');
  }

  await page.screenshot({ path: shotPath, fullPage: true });
  failures.push(...problems);
} catch (e) {
  if (e.message !== 'not drawn') throw e;
} finally {
  await browser.close();
}
if (process.exitCode === 1) process.exit(1);
if (failures.length > 0) {
  console.error(`${pagePath}:\n  ` + failures.join('\n  '));
  process.exit(1);
}
console.log(`${pagePath}: ok (screenshot ${shotPath})`);
