// The Explorer's browser benchmark: opens a (large) profile in headless chromium and measures
//   - the server's first answer on the cold first open (the first GET .../lanes indexes the profile,
//     or for a large trace its first part: the first view, src/server/profile_index.h),
//   - time to first frame: from navigation start to the end of the first complete system-timeline draw
//     (the timeline's frame log, explorer/src/frames.ts), cold and warm (profile already indexed), and
//     whether it was drawn from the partial index; cold, also the time until the complete index was
//     swapped in (the Explorer's mark sightline:index-complete),
//   - the summary's first answer (the Summary tab, clicked after the cold open),
//   - frame times while panning: PANS programmatic pans of PAN_FRACTION of the visible span, one per
//     animation frame, at two zoom levels; the interval between animation frames (what the user sees),
//     the time spent in the timeline's draw(), long tasks (> 50 ms) and frames drawn before the data for
//     the new window had arrived.
// Speed is reported, never asserted: this is not a test. Usually run through bench/explorer/run.sh.
// Usage: node bench/explorer/frame_bench.mjs BASE_URL PROFILE_NAME
// The browser comes from the Explorer's e2e helper (playwright-core is the Explorer's dev dependency,
// installed by scripts/explorer.sh).
import { VIEWPORT, launchBrowser } from '../../explorer/tests/e2e/browser.mjs';

const [baseUrl, profile] = process.argv.slice(2);
if (!baseUrl || !profile) {
  console.error('usage: frame_bench.mjs BASE_URL PROFILE_NAME');
  process.exit(2);
}

const PANS = Number(process.env.PANS ?? 60);
const PAN_FRACTION = Number(process.env.PAN_FRACTION ?? 0.05);
const OPEN_TIMEOUT_MS = 180_000;

const quantile = (values, q) => {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
};
const ms = (value) => (Number.isFinite(value) ? `${value.toFixed(1)} ms` : 'n/a');
const seconds = (value) => (Number.isFinite(value) ? `${(value / 1000).toFixed(2)} s` : 'n/a');

// Navigates to the profile and waits for the first complete frame; times are ms from navigation start.
async function open(page) {
  await page.goto('about:blank'); // a new document: a fresh frame log and resource timings
  await page.goto(`${baseUrl}#/p/${encodeURIComponent(profile)}`);
  await page.waitForFunction(() => window.__explorer?.firstCompleteFrame() !== undefined, undefined,
    { timeout: OPEN_TIMEOUT_MS, polling: 50 });
  return page.evaluate((name) => {
    const first = window.__explorer.firstCompleteFrame();
    const resources = performance.getEntriesByType('resource');
    const lanes = resources.find((r) => r.name.includes(`/api/profiles/${encodeURIComponent(name)}/lanes`));
    const events = resources.filter((r) => r.name.includes('/events?'));
    return {
      firstFrame: first.at + first.drawMs,
      firstDraw: first.drawMs,
      boxes: first.boxes,
      lanesRequest: lanes ? lanes.responseEnd - lanes.requestStart : NaN,
      eventsRequest: events.length > 0 ? events[0].responseEnd - events[0].requestStart : NaN,
      eventsBytes: events.length > 0 ? events[0].encodedBodySize || events[0].transferSize : NaN,
      partial: window.__explorer.partial,
    };
  }, profile);
}

// After a cold open from the partial index: ms from navigation start until the complete index is shown.
async function indexComplete(page) {
  await page.waitForFunction(() => window.__explorer?.indexComplete() !== undefined, undefined,
    { timeout: OPEN_TIMEOUT_MS, polling: 100 });
  return page.evaluate(() => window.__explorer.indexComplete());
}

// The Summary tab of the open profile, asked for the first time (the server has not summarized it yet):
// ms from the click to the metrics on the page, and the server's answer time.
async function summaryCold(page) {
  const started = await page.evaluate(() => performance.now());
  await page.click('#tabs button[data-tab="summary"]');
  await page.waitForSelector('[data-metric="executions"]', { timeout: OPEN_TIMEOUT_MS });
  return page.evaluate(({ name, from }) => {
    const answer = performance.getEntriesByType('resource').find((r) =>
      r.name.includes(`/api/profiles/${encodeURIComponent(name)}/summary`));
    return { shown: performance.now() - from, request: answer ? answer.responseEnd - answer.requestStart : NaN };
  }, { name: profile, from: started });
}

// Zooms to `spanFraction` of the profile around its middle, waits for that window's data, then pans.
async function panScenario(page, spanFraction) {
  return page.evaluate(async ({ spanFraction, pans, fraction, settleLimitMs }) => {
    const explorer = window.__explorer;
    const nextFrame = () => new Promise((resolve) => requestAnimationFrame(resolve));
    // Waits until the latest frame shows data for the whole view; returns how long that took.
    const settle = async () => {
      const from = performance.now();
      while (performance.now() - from < settleLimitMs) {
        await nextFrame();
        const frames = explorer.frames();
        if (frames.length > 0 && frames[frames.length - 1].complete) return performance.now() - from;
      }
      throw new Error(`the timeline did not draw a complete frame within ${settleLimitMs / 1000} s`);
    };
    explorer.zoomTo(spanFraction);
    await nextFrame();
    const zoomSettle = await settle();
    const longTasks = [];
    const observer = new PerformanceObserver((list) => longTasks.push(...list.getEntries().map((e) => e.duration)));
    observer.observe({ type: 'longtask' });
    const stamps = [];
    const started = performance.now();
    for (let i = 0; i < pans; i++) {
      stamps.push(await nextFrame());
      explorer.panBy(fraction);
    }
    stamps.push(await nextFrame());
    const ended = performance.now();
    const panSettle = await settle();
    observer.disconnect();
    const frames = explorer.frames().filter((f) => f.at >= started && f.at <= ended);
    const intervals = stamps.slice(1).map((t, i) => t - stamps[i]);
    const fetches = performance.getEntriesByType('resource').filter((r) => r.name.includes('/events?') &&
      r.startTime >= started && r.startTime <= ended);
    return {
      zoomSettle, panSettle, intervals, draws: frames.map((f) => f.drawMs), incomplete: frames.filter((f) => !f.complete).length,
      frames: frames.length, boxes: frames.map((f) => f.boxes), longTasks, fetches: fetches.length,
      fetchMs: fetches.map((r) => r.responseEnd - r.requestStart),
      fetchBytes: fetches.map((r) => r.encodedBodySize || r.transferSize),
    };
  }, { spanFraction, pans: PANS, fraction: PAN_FRACTION, settleLimitMs: OPEN_TIMEOUT_MS });
}

const { context, close } = await launchBrowser('sightline-bench');
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (error) => {
    console.error(`page error: ${error}`);
    failed = true;
  });
  const cold = await open(page);
  const complete = cold.partial ? await indexComplete(page) : cold.firstFrame;
  const lanes = await page.evaluate(async (name) =>
    (await fetch(`/api/profiles/${encodeURIComponent(name)}/lanes`)).json(), profile);
  const events = lanes.lanes.reduce((sum, lane) => sum + lane.events, 0);
  const summary = await summaryCold(page);
  const warm = await open(page);
  const scenarios = [];
  for (const spanFraction of [0.1, 0.001]) scenarios.push({ spanFraction, ...(await panScenario(page, spanFraction)) });

  // run.sh's anchor: md5sum of trace.json in the same run (ms); figures are also given as ratios to it.
  const anchor = Number(process.env.SIGHTLINE_BENCH_ANCHOR_MS ?? NaN);
  const ratio = (value) => (Number.isFinite(anchor) && anchor > 0 ? ` (x_md5 ${(value / anchor).toFixed(2)})` : '');
  const rows = [
    ['profile', `${profile}: ${events.toLocaleString('en-US')} events in ${lanes.lanes.length} lanes`, ''],
    ['anchor: md5sum of trace.json, same run', seconds(anchor), ''],
    ['server first answer, cold first open (GET lanes)', `${seconds(cold.lanesRequest)}${ratio(cold.lanesRequest)}`, ''],
    ['time to first frame, cold (navigation -> first complete draw)', `${seconds(cold.firstFrame)}${ratio(cold.firstFrame)}` +
      (cold.partial ? ', from the partial index (progress shown)' : ''), events > 5_000_000 ? '< 5 s' : '< 2 s'],
    ['complete index shown, cold (navigation -> swapped in)', `${seconds(complete)}${ratio(complete)}`, ''],
    ['summary, cold (click -> metrics shown; server answer)', `${seconds(summary.shown)}; ${seconds(summary.request)}`, '< 2 s'],
    ['time to first frame, warm (profile already indexed)', seconds(warm.firstFrame), '< 3 s'],
    ['first window query (GET events), warm', `${ms(warm.eventsRequest)}, ${(warm.eventsBytes / 1024).toFixed(0)} KiB`, ''],
    ['first draw()', `${ms(warm.firstDraw)}, ${warm.boxes} boxes`, ''],
  ];
  for (const s of scenarios) {
    const label = `pan at ${s.spanFraction * 100}% of the profile`;
    rows.push(
      [`${label}: frame interval median / p95 / max`,
        `${ms(quantile(s.intervals, 0.5))} / ${ms(quantile(s.intervals, 0.95))} / ${ms(Math.max(...s.intervals))}`, '< 16 ms'],
      [`${label}: draw() median / p95 / max`,
        `${ms(quantile(s.draws, 0.5))} / ${ms(quantile(s.draws, 0.95))} / ${ms(Math.max(...s.draws))}`, ''],
      [`${label}: frames, stale frames, boxes per frame (median)`,
        `${s.frames} drawn for ${PANS} pans, ${s.incomplete} before new data, ${quantile(s.boxes, 0.5)}`, ''],
      [`${label}: zoom -> complete frame, last pan -> complete frame`, `${seconds(s.zoomSettle)}, ${seconds(s.panSettle)}`,
        ''],
      [`${label}: window queries during the pans`, s.fetches === 0 ? 'none' :
        `${s.fetches}, median ${ms(quantile(s.fetchMs, 0.5))}, ${(quantile(s.fetchBytes, 0.5) / 1024).toFixed(0)} KiB`, ''],
      [`${label}: long tasks (> 50 ms)`, s.longTasks.length === 0 ? 'none'
        : `${s.longTasks.length}, longest ${ms(Math.max(...s.longTasks))}`, ''],
    );
  }
  const width = [0, 1, 2].map((c) => Math.max(...rows.map((r) => r[c].length), 3));
  const line = (r) => `| ${r.map((cell, c) => cell.padEnd(width[c])).join(' | ')} |`;
  console.log(line(['measure', 'result', 'aim']));
  console.log(`|${width.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const r of rows) console.log(line(r));
  console.log(`(viewport ${VIEWPORT.width}x${VIEWPORT.height}, device scale 1, ${PANS} pans of ${PAN_FRACTION * 100}% ` +
    'of the visible span, one per animation frame; the frame interval cannot go below the 60 Hz refresh, ' +
    '16.7 ms, so a frame that meets the aim shows as 16.7 ms and draw() is the work it cost)');
} catch (error) {
  failed = true;
  console.error(`frame_bench: ${error instanceof Error ? error.stack : error}`);
} finally {
  await close();
}
process.exit(failed ? 1 : 0);
