// End-to-end test of the Explorer as a Perfetto user drives it (issue 17): the first view, deep links
// and Back/Forward, exact 64-bit ids, the rulers, cursor and measure, search that zooms and pages,
// the keys and the wheel, tooltips at the edges. Usage: node tests/e2e/navigation.e2e.mjs BASE_URL
// PROFILE_ROOT (as explorer.e2e.mjs; run by run-e2e.sh after it). It adds a copy of the naive profile,
// naive-wait, whose step and kbl_exec_wait last 0.6 s longer: a step mostly spent waiting on the device,
// as in the study's profiles. Every wait is for a condition, never a fixed time.
import { cpSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { check, launchBrowser, resultsDir } from './browser.mjs';

const [baseUrl, profileRoot] = process.argv.slice(2);
if (!baseUrl || !profileRoot) {
  console.error('usage: navigation.e2e.mjs BASE_URL PROFILE_ROOT');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const results = resultsDir();

// naive-wait: the naive profile with 0.6 s of waiting added to the step (text edits: the trace's 64-bit
// ids must not go through JSON.parse).
const WAIT_US = 600_000;
cpSync(join(profileRoot, 'naive'), join(profileRoot, 'naive-wait'), { recursive: true });
const tracePath = join(profileRoot, 'naive-wait', 'trace.json');
const traceText = readFileSync(tracePath, 'utf8');
const stretched = traceText.replace(/("name":"(?:ProfilerStep#\d+|kbl_exec_wait)"[^\n]*?"dur":)([0-9.]+)/g,
  (_, head, dur) => `${head}${(Number(dur) + WAIT_US).toFixed(3)}`);
if (stretched === traceText) throw new Error('naive-wait: no ProfilerStep / kbl_exec_wait event to stretch');
writeFileSync(tracePath, stretched);
const correlations = new Set([...traceText.matchAll(/"correlation":\s*(\d+)/g)].map((m) => m[1]));

const { context, close } = await launchBrowser('sightline-e2e-nav');
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors = [];
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  page.setDefaultTimeout(15000);
  const shot = (name) => page.screenshot({ path: join(results, name), fullPage: true });
  const api = (path) => page.evaluate(async (p) => (await fetch(p)).json(), path);
  const explorer = (fn, arg) => page.evaluate(fn, arg);
  const waitView = (predicate, arg) => page.waitForFunction(predicate, arg);
  const plotRect = () => page.evaluate(() => {
    const r = document.querySelector('[data-testid="system-timeline"]').getBoundingClientRect();
    return { left: r.left + 280, right: r.right, top: r.top, bottom: r.bottom, width: r.width - 280 };
  });
  const blur = () => page.evaluate(() => document.activeElement?.blur());

  // ---- 1. First view: the executions and the ops that launched them, not the whole step.
  await page.goto(`${baseUrl}#/p/naive-wait`);
  await page.waitForFunction(() => window.__explorer.profile === 'naive-wait' && window.__explorer.view !== undefined);
  const executions = (await api('/api/profiles/naive-wait/search?q=nc_exec_running')).matches;
  const firstOp = (await api('/api/profiles/naive-wait/search?q=aten::mul')).matches[0];
  const lastExec = executions.at(-1);
  const activity = { start: firstOp.ts, end: lastExec.ts + lastExec.dur };
  const first = await explorer(() => ({ view: window.__explorer.view, bounds: window.__explorer.bounds }));
  check(first.bounds.end - first.bounds.start > WAIT_US, `naive-wait's step lasts over 0.6 s (${first.bounds.end - first.bounds.start} us)`);
  check(first.view.start <= activity.start && first.view.end >= activity.end &&
    first.view.end - first.view.start < 1.5 * (activity.end - activity.start),
    `the first view covers the launching op to the last execution and little more (${JSON.stringify(first.view)} for ` +
    `${JSON.stringify(activity)})`);
  await page.waitForFunction((id) => (window.__explorer.boxOf(id)?.width ?? 0) >= 3, executions[0].id);
  check(true, 'the first execution is drawn at least 3 px wide on the first view');
  await shot('11-first-view.png');
  await blur();
  await page.keyboard.press('0');
  await waitView(() => window.__explorer.view.end - window.__explorer.view.start >=
    window.__explorer.bounds.end - window.__explorer.bounds.start);
  check(true, '0 fits the whole profile');

  // ---- 5. Search zooms to a match too narrow to see, and pages through every match.
  await page.keyboard.press('/');
  check(await page.evaluate(() => document.activeElement?.id === 'search'), '/ focuses the search box');
  await page.keyboard.type('nc_exec_running');
  await page.keyboard.press('Enter');
  await page.waitForFunction((id) => window.__explorer.selected?.id === id, executions[0].id);
  await page.waitForFunction((id) => (window.__explorer.boxOf(id)?.width ?? 0) >= 3, executions[0].id);
  check(true, 'a 5 us match in a 0.6 s view is zoomed to (drawn at least 3 px wide)');
  const allRuntime = (await api('/api/profiles/naive-wait/search?q=nrt&limit=1000')).matches;
  check(allRuntime.length > 8, `'nrt' matches ${allRuntime.length} events`);
  await page.evaluate(() => { window.__explorer.searchPage = 4; });
  await page.fill('#search', 'nrt');
  for (let i = 0; i < allRuntime.length; i++) {
    await page.press('#search', 'Enter');
    await page.waitForFunction(([id, status]) => window.__explorer.selected?.id === id &&
      document.getElementById('search-status').textContent === status,
    [allRuntime[i].id, `${i + 1} / ${allRuntime.length}`]);
  }
  check(true, `Enter steps through all ${allRuntime.length} matches, 4 per request, in start order`);
  await page.press('#search', 'Shift+Enter');
  await page.waitForFunction((id) => window.__explorer.selected?.id === id, allRuntime.at(-2).id);
  check(true, 'Shift+Enter steps back');
  await page.evaluate(() => { window.__explorer.searchPage = 200; });

  // ---- 3. Exact 64-bit ids: the execution's correlation id is the trace's literal.
  await page.fill('#search', 'nc_exec_running');
  await page.press('#search', 'Enter');
  // The details panel of that execution (an earlier match's panel has a correlation too).
  await page.waitForFunction((id) => window.__explorer.selected?.id === id &&
    document.querySelector('[data-testid="selected-name"]')?.textContent === 'nc_exec_running' &&
    document.querySelector('[data-testid="details"] dd[data-arg="correlation"]') !== null, executions[0].id);
  const correlation = await page.textContent('[data-testid="details"] dd[data-arg="correlation"]');
  check(correlations.has(correlation), `the correlation id is shown exactly (${correlation}, one of the trace's ` +
    `${[...correlations].slice(0, 2).join(', ')}, ...)`);

  // ---- 4. Rulers: base + offsets at 400 ns visible near 12.326 ms, cursor readout, drag-to-measure.
  await page.evaluate(() => { location.hash = '#/p/naive-wait?start=12326.100&end=12326.500'; });
  await waitView(() => Math.abs(window.__explorer.view.start - 12326.1) < 1e-3 && window.__explorer.ruler?.ticks.length > 0 &&
    Math.abs(window.__explorer.ruler.ticks[0].time - 12326.1) < 0.06);
  const zoomed = await explorer(() => window.__explorer.ruler);
  const labels = zoomed.ticks.map((t) => t.label);
  check(zoomed.base !== undefined && /^12\.326\d* ms$/.test(zoomed.base.label) && labels.length >= 4 &&
    new Set(labels).size === labels.length && labels.every((l) => /^\+\d+ ns$/.test(l)),
    `400 ns visible at 12.326 ms: base ${zoomed.base?.label} and offsets ${labels.join(' ')}`);
  await page.evaluate(() => { location.hash = '#/p/naive-wait?start=0.000&end=520.000'; });
  // Wait for the ruler of this view: the previous one's ticks (near 12326 us) also pass "> 400".
  await waitView(() => Math.abs(window.__explorer.view.end - 520) < 1e-3 && window.__explorer.ruler?.ticks[0]?.time < 50 &&
    window.__explorer.ruler.ticks.at(-1).time > 400 && window.__explorer.ruler.ticks.at(-1).time <= 520);
  const wide = (await explorer(() => window.__explorer.ruler)).ticks.map((t) => t.label);
  check(wide.includes('0 ns') && wide.includes('100 us') && !wide.some((l) => /\.\d*0 us$/.test(l)),
    `a 520 us view reads ${wide.join(' ')}`);
  let plot = await plotRect();
  const y = plot.top + 60;
  await page.mouse.move(plot.left + plot.width / 2, y);
  await page.waitForSelector('[data-testid="cursor-time"]');
  const cursorText = await page.textContent('[data-testid="cursor-time"]');
  const cursorUs = parseFloat(cursorText.replace('cursor ', '')) * (cursorText.endsWith(' ms') ? 1000 : cursorText.endsWith(' ns') ? 1e-3 : 1);
  check(Math.abs(cursorUs - 260) < 2, `the cursor readout gives the time under the mouse (${cursorText}, expected ~260 us)`);
  await page.keyboard.down('Shift');
  await page.mouse.move(plot.left + plot.width * 0.25, y);
  await page.mouse.down();
  await page.mouse.move(plot.left + plot.width * 0.5, y, { steps: 4 });
  await page.mouse.up();
  await page.keyboard.up('Shift');
  const measured = await explorer(() => window.__explorer.measure);
  check(measured && Math.abs(measured.end - measured.start - 130) < 2, `Shift+drag measures a quarter of 520 us (${JSON.stringify(measured)})`);
  const measureText = await page.textContent('[data-testid="measure"]');
  check(/^Δ 1[23]\d(\.\d+)? us .* \d+ event\(s\) on \d+ lane\(s\)$/.test(measureText), `the measure reads ${measureText}`);
  await page.waitForSelector('[data-testid="area-summary"]');
  const area = await page.$$eval('[data-testid="area-summary"] tr', (rows) => rows.slice(1).map((r) => [...r.children].map((c) => c.textContent)));
  const areaNames = area.map((r) => r[0]);
  check(areaNames.includes('ProfilerStep#3') && areaNames.includes('kbl_exec_wait') && areaNames.length >= 3 &&
    area.find((r) => r[0] === 'kbl_exec_wait')[2].startsWith('130.'),
    `the area summary lists what the range covers, time inside clipped to it (${area.map((r) => r.join(' ')).join('; ')})`);
  await page.mouse.move(plot.left + 10, plot.top + 12);
  await page.mouse.down();
  await page.mouse.move(plot.left + plot.width * 0.1, plot.top + 12, { steps: 4 });
  await page.mouse.up();
  const onRuler = await explorer(() => window.__explorer.measure);
  check(onRuler && onRuler.end - onRuler.start > 30 && onRuler.end - onRuler.start < 60,
    `dragging on the ruler measures too (${JSON.stringify(onRuler)})`);
  await shot('12-ruler-measure.png');

  // ---- 6. Wheel scrolls, Ctrl+wheel zooms; ? help; M mark.
  const viewBefore = await explorer(() => window.__explorer.view);
  await page.mouse.move(plot.left + plot.width / 2, y);
  await page.mouse.wheel(0, 120);
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
  const afterWheel = await explorer(() => window.__explorer.view);
  check(afterWheel.start === viewBefore.start && afterWheel.end === viewBefore.end, 'a plain wheel does not zoom');
  await page.keyboard.down('Control');
  await page.mouse.wheel(0, -200);
  await page.keyboard.up('Control');
  await waitView((before) => window.__explorer.view.end - window.__explorer.view.start < (before.end - before.start) * 0.9, viewBefore);
  check(true, 'Ctrl+wheel zooms in');
  await blur();
  await page.keyboard.press('?');
  await page.waitForSelector('[data-testid="help"]');
  check((await page.textContent('[data-testid="help"]')).includes('Ctrl + wheel'), '? opens the key help');
  await shot('13-help.png');
  await page.keyboard.press('Escape');
  await page.waitForSelector('[data-testid="help"]', { state: 'detached' });
  check(true, 'Esc closes it');
  await page.keyboard.press('m');
  await page.waitForFunction((r) => window.__explorer.mark?.start === r.start && window.__explorer.mark?.end === r.end, onRuler);
  check(true, 'M marks the measured range');
  await page.keyboard.press('m');
  await page.waitForFunction(() => window.__explorer.mark === undefined);
  check(true, 'M again clears the mark');
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => window.__explorer.measure === undefined && !document.querySelector('[data-testid="area-summary"]'));
  check(true, 'Esc clears the measured area and its summary');

  // ---- 2. Deep links into the open session, sel= reveals, Back/Forward between tabs.
  const target = executions.at(-1);
  await page.evaluate(() => { location.hash = '#/p/naive-wait?start=100.000&end=140.000'; });
  await waitView(() => Math.abs(window.__explorer.view.start - 100) < 1e-3 && Math.abs(window.__explorer.view.end - 140) < 1e-3);
  check(true, 'a link to a range of the open profile moves its view');
  await page.evaluate((id) => { location.hash = `#/p/naive-wait?sel=${id}`; }, target.id);
  await page.waitForFunction((id) => window.__explorer.selected?.id === id && (window.__explorer.boxOf(id)?.width ?? 0) >= 3, target.id);
  check(true, 'a sel= link into the open profile selects the event and reveals it');
  await page.evaluate(() => { location.hash = '#/p/naive-wait?start=200.000&end=300.000&sel=0&tab=summary'; });
  await page.waitForFunction(() => window.__explorer.tab === 'summary' && window.__explorer.selected?.id === 0 &&
    Math.abs(window.__explorer.view.start - 200) < 1e-3);
  check(true, 'a link with a tab, a range and a selection restores all three');
  await page.click('#tabs button[data-tab="operators"]');
  await page.waitForFunction(() => location.hash.includes('tab=operators'));
  await page.click('#tabs button[data-tab="timeline"]');
  await page.waitForFunction(() => !location.hash.includes('tab='));
  await page.goBack();
  await page.waitForFunction(() => window.__explorer.tab === 'operators' && location.hash.includes('tab=operators'));
  await page.goBack();
  await page.waitForFunction(() => window.__explorer.tab === 'summary' && window.__explorer.profile === 'naive-wait');
  await page.goForward();
  await page.waitForFunction(() => window.__explorer.tab === 'operators');
  check(await page.isVisible('[data-page="operators"]'), 'Back and Forward move between the tabs of the open profile');

  // ---- 7. Tooltips on the bottom lane at the right edge stay in the window; the lanes do not scroll.
  await page.click('#tabs button[data-tab="timeline"]');
  await page.evaluate((e) => { location.hash = `#/p/naive-wait?start=${(e.ts + e.dur / 2 - 100).toFixed(3)}&end=${(e.ts + e.dur / 2).toFixed(3)}`; }, target);
  await page.waitForFunction((id) => (window.__explorer.boxOf(id)?.width ?? 0) > 0, target.id);
  const edge = await explorer((id) => window.__explorer.boxOf(id).toJSON(), target.id);
  const wrapBefore = await page.evaluate(() => document.querySelector('.timeline-wrap').scrollHeight);
  plot = await plotRect();
  await page.mouse.move(Math.min(edge.x + edge.width - 2, plot.right - 3), edge.y + edge.height / 2);
  await page.waitForSelector('[data-testid="system-timeline"] ~ .tooltip', { state: 'visible' });
  const tip = await page.evaluate(() => {
    const r = document.querySelector('[data-testid="system-timeline"] ~ .tooltip').getBoundingClientRect();
    return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, text: r.width > 0 };
  });
  const viewport = page.viewportSize();
  check(tip.left >= 0 && tip.right <= viewport.width && tip.top >= 0 && tip.bottom <= viewport.height,
    `the tooltip of the bottom lane's last event stays in the window (${JSON.stringify(tip)})`);
  const wrapAfter = await page.evaluate(() => document.querySelector('.timeline-wrap').scrollHeight);
  check(wrapAfter === wrapBefore, `showing it does not grow the lanes' scroll area (${wrapBefore} -> ${wrapAfter})`);

  // ---- 8. The dependency chain: the trace's flows only, one tree whichever end it is opened from.
  const mulDetails = await api(`/api/profiles/naive-wait/events/${firstOp.id}`);
  const flows = [];
  const walk = async (details) => {
    for (const f of details.flows_out) {
      flows.push(`${details.name}#${details.id} -${f.category}-> ${f.event.name}#${f.event.id}`);
      await walk(await api(`/api/profiles/naive-wait/events/${f.event.id}`));
    }
  };
  await walk(mulDetails);
  flows.sort();
  const execOfMul = flows.map((f) => /-ac2g-> nc_exec_running#(\d+)$/.exec(f)).find(Boolean);
  check(flows.length >= 3 && execOfMul, `aten::mul's flows in the trace: ${flows.join(', ')}`);
  await page.evaluate((id) => { location.hash = `#/p/naive-wait?sel=${id}`; }, firstOp.id);
  await page.waitForFunction((id) => window.__explorer.chain?.selected.id === id, firstOp.id);
  const fromOp = await explorer(() => window.__explorer.arrows());
  check(JSON.stringify(fromOp) === JSON.stringify(flows), `the arrows from aten::mul are its flows (${fromOp.join(', ')})`);
  const treeText = await page.$$eval('[data-testid="chain-tree"] .tree-row', (rows) =>
    rows.map((r) => `${parseInt(r.style.paddingLeft, 10) / 18}:${r.querySelector('.layer').textContent}`));
  check(treeText[0] === '0:aten::mul' && treeText.includes('1:nrt_dma_mem_alloc') && treeText.includes('1:nrta_execute_schedule') &&
    treeText.includes('2:nc_exec_running'), `the chain reads as the tree op -> {allocation, schedule -> execution} (${treeText.join(' ')})`);
  await shot('15-chain-tree.png');
  await page.click(`[data-testid="chain-tree"] .tree-row[data-event="${execOfMul[1]}"]`);
  await page.waitForFunction((id) => window.__explorer.chain?.selected.id === id, Number(execOfMul[1]));
  const fromExec = await explorer(() => window.__explorer.arrows());
  const treeFromExec = await page.$$eval('[data-testid="chain-tree"] .tree-row', (rows) =>
    rows.map((r) => `${parseInt(r.style.paddingLeft, 10) / 18}:${r.querySelector('.layer').textContent}`));
  check(JSON.stringify(fromExec) === JSON.stringify(fromOp) && JSON.stringify(treeFromExec) === JSON.stringify(treeText),
    'opened from the execution, the chain is the same tree with the same arrows');

  // ---- 4 (device). The device timeline has a real axis and a cursor readout.
  await page.evaluate((id) => { location.hash = `#/p/naive-wait?sel=${id}`; }, target.id);
  await page.waitForSelector('[data-testid="open-device"]');
  await page.click('[data-testid="open-device"]');
  await page.waitForFunction(() => (window.__explorer.deviceRuler?.ticks.length ?? 0) >= 3);
  const device = (await explorer(() => window.__explorer.deviceRuler)).ticks.map((t) => t.label);
  check(device.includes('0 ns') && new Set(device).size === device.length && device.every((l) => /^-?\d+(\.\d+)? (ns|us)$/.test(l)),
    `the device timeline's axis reads ${device.join(' ')}`);
  const counters = await explorer(() => window.__explorer.deviceCounters);
  check(counters && counters.bins > 100 && counters.peakHbmGbps > 0 && counters.dmaQueues >= 1 && counters.peakDmaBusy > 0 &&
    counters.peakDmaBusy <= counters.dmaQueues && counters.engines.includes('vector') && counters.peakEngineBusy > 0 &&
    counters.peakEngineBusy <= 1, `counter tracks: HBM bandwidth, engine utilization, DMA queues busy (${JSON.stringify(counters)})`);
  const counterLabels = await page.$$eval('.device-counter-label', (l) => l.map((x) => x.textContent));
  check(JSON.stringify(counterLabels) === JSON.stringify(['HBM GB/s', 'Engines busy', 'DMA queues busy']), 'the counter tracks are labelled');
  const opLegend = await page.$$eval('[data-testid="device-legend"] span[data-key]', (l) => l.map((x) => x.dataset.key));
  await page.selectOption('[data-testid="device-colour"]', 'engine');
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="device-legend"] span[data-key]')].some((s) => s.dataset.key === 'vector'));
  const engineLegend = await page.$$eval('[data-testid="device-legend"] span[data-key]', (l) => l.map((x) => x.dataset.key));
  check(opLegend.some((k) => k.startsWith('aten::')) && engineLegend.includes('dma') && !engineLegend.some((k) => k.startsWith('aten::')),
    `colour by engine changes the legend (${opLegend.join(', ')} -> ${engineLegend.join(', ')})`);
  await page.selectOption('[data-testid="device-colour"]', 'opcode');
  await page.waitForFunction(() => !document.querySelector('[data-testid="device-legend"] span[data-key="vector"]'));
  check(true, 'and by opcode');
  await page.locator('[data-testid="device"]').scrollIntoViewIfNeeded();
  await shot('14-device-axis.png');
  // ---- 8 (client). An operator table of 13,170 rows (the 1M profile's, steps unmerged) shows and sorts
  // at once: the answer is the server's shape, served from here.
  const bigRows = Array.from({ length: 13170 }, (_, i) => ({
    name: `ProfilerStep#${i}`, count: 1 + (i % 7), cpu_total_us: 1000 + ((i * 7919) % 13170), self_cpu_us: (i * 31) % 997,
    device_total_us: (i * 13) % 977, self_device_us: (i * 17) % 1013,
    cells: [`ProfilerStep#${i}`, `${((i * 31) % 997).toFixed(3)}us`, `${((i * 17) % 1013).toFixed(3)}us`, `${1 + (i % 7)}`],
  }));
  await page.route('**/api/profiles/naive/key_averages', (route) => route.fulfill({
    json: { source: 'generated', device: 'NEURON', headers: ['Name', 'Self CPU', 'Self NEURON', '# of Calls'], rows: bigRows,
      footer: ['Self CPU time total: 1.000us'], self_cpu_total_us: 1, self_device_total_us: 1 },
  }));
  await page.goto(`${baseUrl}#/p/naive?tab=operators`);
  await page.waitForFunction(() => window.__explorer.operatorRows?.count === 13170);
  const shown = await explorer(() => document.querySelectorAll('[data-testid="operator-table"] tr[data-name]').length);
  check(shown > 10 && shown < 200, `13,170 rows, ${shown} of them in the page`);
  const sortMs = await explorer(() => {
    const started = performance.now();
    document.querySelector('[data-testid="operator-table"] th[data-key="Name"]').dispatchEvent(new MouseEvent('click', { bubbles: true }));
    return performance.now() - started;
  });
  const firstByName = await page.textContent('[data-testid="operator-table"] tr[data-name] td');
  check(sortMs < 100 && firstByName === 'ProfilerStep#0', `sorting them by name takes ${sortMs.toFixed(1)} ms (first ${firstByName})`);
  await page.evaluate(() => { const s = document.querySelector('[data-testid="operator-scroll"]'); s.scrollTop = s.scrollHeight; });
  await page.waitForFunction(() => window.__explorer.operatorRows.last === 13170);
  const lastName = await page.$$eval('[data-testid="operator-table"] tr[data-name]', (rows) => rows.at(-1).dataset.name);
  check(lastName === 'ProfilerStep#9999', `scrolled to the end, the last row by name is drawn (${lastName})`);
  await page.unroute('**/api/profiles/naive/key_averages');

  // ---- 9. A cold open says it is opening while the server indexes (the lanes answer is held here).
  let releaseLanes;
  const lanesHeld = new Promise((resolve) => { releaseLanes = resolve; });
  await page.route('**/api/profiles/fused/lanes', async (route) => {
    await lanesHeld;
    await route.continue();
  });
  await page.goto(`${baseUrl}#/p/fused`);
  await page.waitForSelector('[data-testid="opening"]');
  check((await page.textContent('[data-testid="opening"]')).includes('Opening fused'), 'a profile that is opening says so');
  releaseLanes();
  await page.waitForFunction(() => window.__explorer.profile === 'fused' && !document.querySelector('[data-testid="opening"]'));
  await page.unroute('**/api/profiles/fused/lanes');
  check(true, 'and shows its timeline once the lanes arrive');

  // ---- An uploaded executable + trace pair opens on its device timeline (its system timeline is one box).
  const fusedFiles = readdirSync(join(profileRoot, 'fused')).filter((f) => /\.(neff|ntff)$/.test(f)).map((f) => join(profileRoot, 'fused', f));
  await page.goto(baseUrl);
  await page.waitForSelector('[data-testid="upload"]');
  await page.setInputFiles('[data-testid="upload-pair"]', fusedFiles);
  await page.fill('[data-testid="upload-name"]', 'pair-fused');
  await page.click('[data-testid="upload-submit"]');
  await page.click('a[data-profile="pair-fused"]');
  await page.waitForSelector('[data-testid="device"]:not([hidden]) .device-row-label');
  check((await explorer(() => window.__explorer.selected?.name)) === 'nc_exec_running',
    'an uploaded .neff + .ntff opens with its execution selected and its device timeline shown');

  // ---- 9. Human units: the insights' raw figures read as sizes and times. The summary is held until
  // its loading bar has counted a second (the cold summary of a large profile takes that long and more).
  let releaseSummary;
  const summaryHeld = new Promise((resolve) => { releaseSummary = resolve; });
  await page.route('**/api/profiles/naive/summary', async (route) => {
    await summaryHeld;
    await route.continue();
  });
  await page.goto(`${baseUrl}#/p/naive?tab=summary`);
  await page.waitForFunction(() => Number(document.querySelector('[data-testid="loading-seconds"]')?.textContent) >= 1 &&
    document.querySelector('[data-testid="loading"] progress') !== null);
  check(true, 'a summary that takes a while shows a progress bar and the seconds so far');
  releaseSummary();
  await page.waitForSelector('[data-testid="insights"] li.insight');
  await page.unroute('**/api/profiles/naive/summary');
  const insightText = await page.textContent('[data-testid="insights"]');
  check(!/\d{4,}(\.\d+)? us\b/.test(insightText) && !/\d{4,} bytes\b/.test(insightText),
    'the insights write sizes and times in human units (no "1182724 bytes", no "2699.3 us")');

  // ---- 9. Compare shows span and idle gaps beside device time; its rows click through to the timelines.
  await page.goto(`${baseUrl}#/compare?a=naive&b=fused`);
  await page.waitForSelector('[data-testid="compare-span"]');
  const spanText = await page.textContent('[data-testid="compare-span"]');
  const idleText = await page.textContent('[data-testid="compare-idle"]');
  check(/^span [\d.]+ (us|ms) → [\d.]+ (us|ms) \([\d.]+x shorter in B\)$/.test(spanText) && /^idle gaps [\d.]+ (us|ms) → 0(\.0)? ns \(largest/.test(idleText),
    `compare reads "${spanText}" and "${idleText}"`);
  await page.click('[data-testid="compare-table"] tr[data-kind="executable"][data-status="removed"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="compare-selection-A"]').textContent.startsWith('selected nc_exec_running') &&
    document.querySelector('[data-testid="compare-selection-B"]').textContent.startsWith('no '));
  const shownA = await explorer(() => {
    const t = window.__explorer.compare.timelines[0];
    return { view: t.view, box: document.querySelector('[data-testid="compare-selection-A"]').textContent };
  });
  check(true, `clicking a removed executable selects its execution in A and says B has none (${shownA.box})`);
  await page.click('[data-testid="compare-table"] tr[data-kind="op"][data-status="added"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="compare-selection-B"]').textContent.startsWith('selected aten::rms_norm'));
  check(true, 'clicking an added op selects it in B');

  // ---- 9. Compare with a missing profile says so instead of "Comparing..." forever.
  await page.goto(`${baseUrl}#/compare?a=naive&b=no-such-profile`);
  await page.waitForSelector('[data-testid="compare-error"]');
  check((await page.textContent('[data-testid="compare-error"]')).includes('no-such-profile'),
    'comparing with a missing profile shows the error in place of "Comparing..."');
  check(pageErrors.length === 0, `no uncaught page errors (${pageErrors.join('; ')})`);
} catch (error) {
  failed = true;
  console.error(`not ok - ${error instanceof Error ? error.stack : error}`);
  for (const page of context.pages()) await page.screenshot({ path: join(results, 'failure-navigation.png'), fullPage: true }).catch(() => {});
} finally {
  await close();
}
console.log(failed ? 'navigation e2e FAILED' : 'navigation e2e passed');
process.exit(failed ? 1 : 0);
