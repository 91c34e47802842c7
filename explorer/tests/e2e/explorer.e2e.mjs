// End-to-end test of the Explorer: headless Debian chromium driven by playwright-core against a running
// `sightline serve`. Usage: node tests/e2e/explorer.e2e.mjs http://127.0.0.1:PORT/?token=TOKEN PROFILE_ROOT
// (the URL the server printed: the page takes the write token from it, as a user's browser does).
// Opens the naive RMSNorm profile, selects an aten::mul on the timeline, follows the dependency chain to
// nc_exec_running, opens the device timeline and checks its engine rows; then the summary (insights),
// the roofline, Compare naive vs fused, and uploads from the browser (the fused directory under a new
// name, and a malformed pair that the server refuses). PROFILE_ROOT is the served directory, where the
// fused profile's files are read from for the upload. Screenshots go to test-results/.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, launchBrowser, resultsDir } from './browser.mjs';

const [baseUrl, profileRoot] = process.argv.slice(2);
if (!baseUrl || !profileRoot) {
  console.error('usage: explorer.e2e.mjs BASE_URL PROFILE_ROOT');
  process.exit(2);
}
const results = resultsDir();

const { context, close } = await launchBrowser('sightline-e2e');
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
  const clocks = await page.$$eval('[data-testid="host-clock"]', (cells) => cells.map((c) => [c.textContent, c.title]));
  check(clocks.length >= 2 && clocks.every(([text, title]) => text === 'modeled' && /simulated in [0-9.]+ m?s of wall time/.test(title)),
    `each profile says its host clock is modeled and what the simulator cost, apart (${JSON.stringify(clocks.slice(0, 2))})`);
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
  await page.click('[data-testid="operator-table"] th[data-key="# of Calls"]');
  await shot('05-operator-table.png');

  // The fused profile opens too, and an unknown profile shows the server's message.
  await page.goto(`${baseUrl}#/p/fused`);
  await page.waitForFunction(() => window.__explorer.profile === 'fused');
  await page.waitForSelector('[data-testid="system-timeline"]');
  await shot('06-fused.png');
  await page.goto(`${baseUrl}#/p/no-such-profile`);
  await page.waitForSelector('#error:not([hidden])');
  check((await page.textContent('#error')).includes("no profile named 'no-such-profile'"), 'unknown profile shows the server message');

  // Summary of the naive profile: six tiny executions with the device idle between them.
  await page.goto(`${baseUrl}#/p/naive?tab=summary`);
  await page.waitForSelector('[data-testid="insights"] li.insight');
  const insights = await page.$$eval('[data-testid="insights"] li.insight', (items) => items.map((i) => i.dataset.insight));
  check(insights.includes('idle_gaps') || insights.includes('tiny_executions'),
    `summary lists the idle-gap / tiny-executions insight (${insights.join(', ')})`);
  const evidence = await page.textContent('[data-insight="idle_gaps"], [data-insight="tiny_executions"]');
  check(/Evidence:.*\d/.test(evidence) && evidence.includes('Fix:'), 'the insight shows its evidence and fix');
  const engines = await page.$$eval('[data-testid="engine-bars"] .bar-row', (rows) => rows.map((r) => r.dataset.engine));
  check(['tensor', 'vector', 'scalar', 'gpsimd', 'dma'].every((e) => engines.includes(e)), `engine bars (${engines.join(', ')})`);
  check((await page.textContent('[data-testid="verdict"]')).startsWith('Memory-bound'), 'naive RMSNorm is memory-bound');
  check(await page.isVisible('[data-metric="mfu_estimated_percent"]') && await page.isVisible('[data-metric="mbu_estimated_percent"]'),
    'MFU and MBU are shown');
  await shot('07-summary.png');

  // Roofline: a circle per executable and op, hover shows its values.
  await page.click('#tabs button[data-tab="roofline"]');
  await page.waitForSelector('circle.roofline-point');
  const circles = await page.$$eval('circle.roofline-point', (c) => c.length);
  const tableRows = await page.$$eval('[data-testid="roofline-table"] tr', (r) => r.length - 1);
  check(circles > 0 && circles === tableRows, `roofline has ${circles} points, one per table row`);
  // The naive RMSNorm's ops are f32 Vector and Scalar work: their engines' roofs are drawn below the
  // Tensor engine's, labelled.
  const lowerRoofs = await page.$$eval('[data-testid="roofline-chart"] text', (texts) =>
    texts.map((t) => t.textContent ?? '').filter((t) => /^(Vector|Scalar) fp32 /.test(t)));
  check(lowerRoofs.length >= 2 && (await page.$$('[data-testid="roofline-roof"]')).length === lowerRoofs.length,
    `the roofline draws the engines' own roofs (${lowerRoofs.join(', ')})`);
  await page.waitForFunction(() => location.hash.includes('tab=roofline'));
  check(true, 'the roofline tab is in the deep link');
  await page.hover('circle.roofline-point >> nth=-1');
  await page.waitForSelector('.roofline-plot .tooltip', { state: 'visible' });
  check((await page.textContent('.roofline-plot .tooltip')).includes('FLOP/B'), 'hovering a point shows its values');
  await shot('08-roofline.png');
  const mulPoint = await page.$$eval('circle.roofline-point', (circles) =>
    circles.find((c) => c.textContent.startsWith('aten::mul (op)'))?.dataset.index);
  // Circles overlap; the click goes to this one whatever lies on top of it.
  await page.locator(`circle.roofline-point[data-index="${mulPoint}"]`).dispatchEvent('click');
  await page.waitForSelector('#tabs button.active[data-tab="timeline"]');
  // The tab turns active before the timeline has laid out: wait for it rather than sample it once.
  const shown = await page.waitForSelector('[data-testid="system-timeline"]', { state: 'visible', timeout: 15000 })
    .then(() => true, () => false);
  check(shown, "clicking aten::mul's point shows it on the timeline");

  // Compare naive (A) vs fused (B): the removed executables rank first, both timelines share one axis.
  await page.goto(`${baseUrl}#/compare?a=naive&b=fused`);
  await page.waitForSelector('[data-testid="compare-table"] tr[data-kind]');
  const ranked = await page.$$eval('[data-testid="compare-table"] tr[data-kind]', (rows) =>
    rows.map((r) => `${r.dataset.kind}:${r.dataset.status}`));
  const firstOther = ranked.findIndex((r) => r !== 'executable:removed');
  check(ranked[0] === 'executable:removed' && ranked.slice(firstOther).every((r) => r !== 'executable:removed'),
    `removed executables are listed first (${ranked.slice(0, 8).join(', ')}, ...)`);
  check(ranked.includes('executable:added'), 'the fused executable is listed as added');
  await page.waitForFunction(() => window.__explorer.compare?.timelines.length === 2);
  check(await page.isVisible('[data-testid="compare-timeline-a"]') && await page.isVisible('[data-testid="compare-timeline-b"]'),
    'both system timelines are stacked');
  const relative = () => page.evaluate(() => window.__explorer.compare.timelines.map((t) =>
    [t.view.start - t.bounds.start, t.view.end - t.bounds.start]));
  const [beforeA] = await relative();
  await page.focus('body');
  await page.keyboard.press('w');
  await page.keyboard.press('d');
  const [afterA, afterB] = await relative();
  check(afterA[1] - afterA[0] < beforeA[1] - beforeA[0] && Math.abs(afterA[0] - afterB[0]) < 1e-6 &&
    Math.abs(afterA[1] - afterB[1]) < 1e-6, 'zoom and pan move both timelines together on the shared axis');
  await page.waitForFunction(() => location.hash.includes('start='));
  await page.click('[data-testid="compare-table"] th[data-key="delta_ns"]');
  const deltas = await page.$$eval('[data-testid="compare-table"] tr[data-kind]', (rows) => rows.map((r) => r.children[8].textContent));
  const values = deltas.map((d) => (d === '0' ? 0 : (d.startsWith('−') ? -1 : 1) * parseFloat(d.slice(1)) *
    (d.endsWith(' ms') ? 1000 : d.endsWith(' ns') ? 0.001 : 1)));
  check(values.every((v, i) => i === 0 || values[i - 1] >= v), 'sorting by delta orders the rows');
  await page.click('[data-testid="compare-table"] th[data-key="rank"]');
  await page.click('[data-testid="compare-fit"]');
  await page.mouse.move(5, 5);
  await shot('09-compare.png');

  // Upload the fused profile's directory under a new name from the browser.
  await page.goto(baseUrl);
  await page.waitForSelector('[data-testid="upload"]');
  await page.setInputFiles('[data-testid="upload-directory"]', join(profileRoot, 'fused'));
  check((await page.inputValue('[data-testid="upload-name"]')) === 'fused', 'the folder name is suggested as the name');
  await page.fill('[data-testid="upload-name"]', 'fused-uploaded');
  await page.click('[data-testid="upload-submit"]');
  await page.waitForSelector('a[data-profile="fused-uploaded"]');
  check((await page.textContent('[data-testid="upload-status"]')).includes("Uploaded 'fused-uploaded'"),
    'the uploaded profile is listed with a confirmation');
  await shot('10-upload.png');

  // Uploading it again under the same name is refused by the server, whose message is shown.
  await page.setInputFiles('[data-testid="upload-directory"]', join(profileRoot, 'fused'));
  await page.fill('[data-testid="upload-name"]', 'fused-uploaded');
  await page.click('[data-testid="upload-submit"]');
  await page.waitForSelector('[data-testid="upload-status"].error');
  const taken = await page.textContent('[data-testid="upload-status"]');
  check(taken.startsWith('Upload failed: ') && taken.includes('fused-uploaded') && !taken.includes('the server answered'),
    `a taken name shows the server's error (${taken})`);

  // A malformed executable + trace pair: the server's error text is shown, nothing is listed.
  const junk = mkdtempSync(join(tmpdir(), 'sightline-e2e-upload-'));
  writeFileSync(join(junk, 'neff_0123456789abcdef.neff'), 'this is not an executable');
  writeFileSync(join(junk, '0123456789abcdef_instid_0_vnc_0.ntff'), 'nor an instruction trace');
  await page.setInputFiles('[data-testid="upload-pair"]', [join(junk, 'neff_0123456789abcdef.neff'),
    join(junk, '0123456789abcdef_instid_0_vnc_0.ntff')]);
  await page.fill('[data-testid="upload-name"]', 'malformed');
  await page.click('[data-testid="upload-submit"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="upload-status"]')?.textContent?.includes('Upload failed'));
  const refused = await page.textContent('[data-testid="upload-status"]');
  rmSync(junk, { recursive: true, force: true });
  check(!refused.includes('the server answered') && refused.length > 'Upload failed: '.length,
    `a malformed pair shows the server's error (${refused})`);
  check(!(await page.isVisible('a[data-profile="malformed"]')), 'the malformed upload is not listed');
  check(consoleErrors.length === 0, `no uncaught page errors (${consoleErrors.join('; ')})`);
} catch (error) {
  failed = true;
  console.error(`not ok - ${error instanceof Error ? error.stack : error}`);
  for (const page of context.pages()) await page.screenshot({ path: join(results, 'failure.png'), fullPage: true }).catch(() => {});
} finally {
  await close();
}
console.log(failed ? 'e2e FAILED' : 'e2e passed');
process.exit(failed ? 1 : 0);
