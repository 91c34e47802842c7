// End-to-end test of the Explorer: headless Debian chromium driven by playwright-core against a running
// sightline-serve. Usage: node tests/e2e/explorer.e2e.mjs http://127.0.0.1:PORT/
// Opens the naive RMSNorm profile, selects an aten::mul on the timeline, follows the dependency chain to
// nc_exec_running, opens the device timeline and checks its engine rows; screenshots go to test-results/.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const baseUrl = process.argv[2];
if (!baseUrl) {
  console.error('usage: explorer.e2e.mjs BASE_URL');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const results = join(here, '..', '..', 'test-results');
mkdirSync(results, { recursive: true });
const chromiumPath = process.env.SIGHTLINE_CHROMIUM ?? '/usr/bin/chromium';
const userData = mkdtempSync(join(tmpdir(), 'sightline-e2e-chromium-'));

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
  console.log(`ok - ${message}`);
}

const context = await chromium.launchPersistentContext(userData, {
  executablePath: chromiumPath,
  headless: true,
  viewport: { width: 1600, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--force-device-scale-factor=1'],
});
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const consoleErrors = [];
  page.on('pageerror', (error) => consoleErrors.push(String(error)));
  page.setDefaultTimeout(15000);
  const shot = (name) => page.screenshot({ path: join(results, name), fullPage: true });

  // Profile list.
  await page.goto(baseUrl);
  await page.waitForSelector('[data-testid="profile-list"]');
  const names = await page.$$eval('[data-testid="profile-list"] a[data-profile]', (links) => links.map((a) => a.textContent));
  check(names.includes('naive') && names.includes('fused'), `profile list shows naive and fused (${names.join(', ')})`);
  await shot('01-profiles.png');

  // Open the naive profile; find an aten::mul with search, then select it by clicking its box on the canvas.
  await page.click('a[data-profile="naive"]');
  await page.waitForSelector('[data-testid="system-timeline"]');
  await page.fill('#search', 'aten::mul');
  await page.press('#search', 'Enter');
  await page.waitForFunction(() => window.__explorer.selected?.name === 'aten::mul');
  const mulId = await page.evaluate(() => window.__explorer.selected.id);
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => window.__explorer.selected === undefined);
  await page.waitForFunction((id) => window.__explorer.boxOf(id) !== undefined, mulId);
  const box = await page.evaluate((id) => {
    const r = window.__explorer.boxOf(id);
    return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
  }, mulId);
  await page.mouse.click(box.x, box.y);
  await page.waitForFunction((id) => window.__explorer.chain?.selected.id === id, mulId);
  check((await page.textContent('[data-testid="selected-name"]')) === 'aten::mul', 'clicking the canvas selects aten::mul');

  // Dependency chain: framework -> runtime -> hardware.
  await page.waitForSelector('[data-testid="downstream"] tr[data-event]');
  const downstream = await page.$$eval('[data-testid="downstream"] tr[data-event]', (rows) =>
    rows.map((r) => [r.querySelector('.layer')?.textContent, r.children[1].textContent]));
  check(downstream.some(([layer, name]) => layer === 'runtime' && name === 'nrta_execute_schedule'),
    'chain reaches nrta_execute_schedule on the runtime lane');
  check(downstream.some(([layer, name]) => layer === 'hardware' && name === 'nc_exec_running'),
    'chain reaches nc_exec_running on the hardware lane');
  await page.mouse.move(5, 5);
  await shot('02-aten-mul-chain.png');

  // Follow the chain: clicking the nc_exec_running row navigates to it.
  const execRow = page.locator('[data-testid="downstream"] tr[data-event]', { hasText: 'nc_exec_running' }).first();
  await execRow.click();
  await page.waitForFunction(() => window.__explorer.chain?.selected.name === 'nc_exec_running');
  const upstream = await page.$$eval('[data-testid="upstream"] tr[data-event]', (rows) => rows.map((r) => r.children[1].textContent));
  check(upstream.includes('aten::mul') && upstream.includes('nrta_execute_schedule'),
    `nc_exec_running's upstream leads back to aten::mul (${upstream.join(' -> ')})`);
  await shot('03-nc-exec-running.png');

  // Device timeline of that execution.
  await page.click('[data-testid="open-device"]');
  await page.waitForSelector('.device-row-label');
  const rows = await page.$$eval('.device-row-label', (labels) => labels.map((l) => l.textContent ?? ''));
  for (const engine of ['Tensor', 'Vector', 'Scalar', 'GpSimd']) {
    check(rows.some((r) => r.startsWith(`${engine} (`)), `device timeline has a ${engine} row`);
  }
  check(rows.some((r) => r.startsWith('DMA q')), `device timeline has DMA queue rows (${rows.join(', ')})`);
  const busyRows = rows.filter((r) => !r.endsWith('(0)'));
  check(busyRows.length >= 2, `instructions on ${busyRows.length} rows`);
  const legend = await page.$$eval('.legend span', (items) => items.map((i) => i.textContent));
  check(legend.includes('aten::mul'), `instructions are coloured by source op (${legend.join(', ')})`);
  await page.locator('[data-testid="device"]').scrollIntoViewIfNeeded();
  await shot('04-device-timeline.png');

  // Keyboard navigation changes the view.
  const before = await page.evaluate(() => location.hash);
  await page.focus('body');
  await page.keyboard.press('w');
  await page.keyboard.press('d');
  await page.waitForFunction((hash) => location.hash !== hash, before);
  check(true, 'W/D zoom and pan update the deep link');

  // Operator table.
  await page.click('#tabs button[data-tab="operators"]');
  await page.waitForSelector('[data-testid="operator-table"] tr[data-name]');
  const operators = await page.$$eval('[data-testid="operator-table"] tr[data-name]', (r) => r.map((x) => x.dataset.name));
  check(operators.includes('aten::mul') && operators.includes('aten::rsqrt'), 'operator table lists aten::mul and aten::rsqrt');
  await page.click('[data-testid="operator-table"] th[data-key="count"]');
  await shot('05-operator-table.png');

  // The fused profile opens too, and an unknown profile shows the server's message.
  await page.goto(`${baseUrl}#/p/fused`);
  await page.waitForFunction(() => window.__explorer.profile === 'fused');
  await page.waitForSelector('[data-testid="system-timeline"]');
  await shot('06-fused.png');
  await page.goto(`${baseUrl}#/p/no-such-profile`);
  await page.waitForSelector('#error:not([hidden])');
  check((await page.textContent('#error')).includes("no profile named 'no-such-profile'"), 'unknown profile shows the server message');
  check(consoleErrors.length === 0, `no uncaught page errors (${consoleErrors.join('; ')})`);
} catch (error) {
  failed = true;
  console.error(`not ok - ${error instanceof Error ? error.stack : error}`);
  for (const page of context.pages()) await page.screenshot({ path: join(results, 'failure.png'), fullPage: true }).catch(() => {});
} finally {
  await context.close();
  rmSync(userData, { recursive: true, force: true });
}
console.log(failed ? 'e2e FAILED' : 'e2e passed');
process.exit(failed ? 1 : 0);
