// End-to-end test of the first view of a large profile (issue 17): the server answers from the first
// part of trace.json while it indexes the whole file (src/server/profile_index.h). The server is started
// by run-e2e.sh with SIGHTLINE_FIRST_VIEW_BYTES small, so that the 100,000-event profile is "large", and
// with SIGHTLINE_FIRST_VIEW_GATE naming GATE_FILE: the complete index is published only once this test
// creates that file, so the partial state lasts as long as the checks need, on any machine. Checks: the
// first frame is drawn from the partial index with a progress indicator, search says its matches are
// partial, and once the gate opens the Explorer swaps in the complete data on the same view.
// Usage: node tests/e2e/firstview.e2e.mjs BASE_URL PROFILE_NAME GATE_FILE EVENTS
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { check, launchBrowser, resultsDir } from './browser.mjs';

const [baseUrl, profile, gate, eventsText] = process.argv.slice(2);
if (!baseUrl || !profile || !gate || !eventsText) {
  console.error('usage: firstview.e2e.mjs BASE_URL PROFILE_NAME GATE_FILE EVENTS');
  process.exit(2);
}
const events = Number(eventsText);
const results = resultsDir();

const { context, close } = await launchBrowser('sightline-e2e-firstview');
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors = [];
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  page.setDefaultTimeout(30000);
  const api = (path) => page.evaluate(async (p) => (await fetch(p)).json(), path);
  const laneEvents = (lanes) => lanes.lanes.reduce((sum, lane) => sum + lane.events, 0);

  // ---- Partial: the first frame from the first part, the indicator, partial answers.
  await page.goto(`${baseUrl}#/p/${encodeURIComponent(profile)}`);
  await page.waitForFunction(() => window.__explorer.profile !== undefined && window.__explorer.firstCompleteFrame() !== undefined);
  check(await page.evaluate(() => window.__explorer.partial), 'the first frame is drawn from the partial index');
  const indicator = page.locator('[data-testid="indexing"]');
  check(await indicator.isVisible(), 'a progress indicator is shown while the trace is indexed');
  const text = await indicator.innerText();
  check(/Indexing trace\.json: \d+% of .* read; showing its first .* until the whole trace is indexed/.test(text),
    `the indicator says how far the indexing is and what is shown (${JSON.stringify(text)})`);
  const partialLanes = await api(`/api/profiles/${profile}/lanes`);
  check(partialLanes.complete === false && partialLanes.progress.trace_bytes > partialLanes.progress.first_view_bytes,
    `the lanes answer says it is partial (${JSON.stringify(partialLanes.progress)})`);
  check(laneEvents(partialLanes) > 0 && laneEvents(partialLanes) < events,
    `the partial index holds the first events only (${laneEvents(partialLanes)} of ${events})`);
  const late = await api(`/api/profiles/${profile}/events?start=${partialLanes.end + 1}&end=${partialLanes.end + 1e6}&width=1000`);
  check(late.complete === false && late.event_count === 0,
    'a window past the indexed part is answered as incomplete, not as an empty final answer');
  await page.fill('#search', 'nc_exec_running');
  await page.press('#search', 'Enter');
  await page.waitForFunction(() => /\d+ \/ \d+/.test(document.getElementById('search-status').textContent));
  await page.evaluate(() => window.__explorer.idle); // the match selected and zoomed to
  await page.waitForFunction(() => window.__explorer.selected !== undefined);
  const partialStatus = await page.locator('#search-status').innerText();
  check(partialStatus.includes('so far (indexing)'), `search says its matches are partial (${JSON.stringify(partialStatus)})`);
  const before = await page.evaluate(() => ({ view: window.__explorer.view, selected: window.__explorer.selected?.id }));
  await page.screenshot({ path: join(results, 'firstview-partial.png') });

  // ---- Complete: the gate opens, the Explorer re-queries and shows the whole profile on the same view.
  writeFileSync(gate, 'open\n');
  await page.waitForFunction(() => window.__explorer.indexComplete() !== undefined && !window.__explorer.partial);
  check(!(await indicator.isVisible()), 'the indicator is gone once the complete index is swapped in');
  const lanes = await api(`/api/profiles/${profile}/lanes`);
  check(lanes.complete === undefined && laneEvents(lanes) === events,
    `the complete index holds every event (${laneEvents(lanes)} of ${events}) and says nothing about progress`);
  const after = await page.evaluate(() => ({ view: window.__explorer.view, selected: window.__explorer.selected?.id }));
  check(Math.abs(after.view.start - before.view.start) < 1e-3 && Math.abs(after.view.end - before.view.end) < 1e-3 &&
    after.selected === before.selected,
    `the view and the selection carry over (${JSON.stringify(before)} -> ${JSON.stringify(after)})`);
  await page.waitForFunction(() => {
    const frames = window.__explorer.frames();
    return frames.length > 0 && frames[frames.length - 1].complete;
  });
  await page.fill('#search', 'nc_exec_running');
  await page.press('#search', 'Enter');
  await page.waitForFunction(() => /^\d+ \/ \d+$/.test(document.getElementById('search-status').textContent));
  const completeStatus = await page.locator('#search-status').innerText();
  const total = (await api(`/api/profiles/${profile}/search?q=nc_exec_running&limit=1`)).total;
  check(completeStatus === `1 / ${total}` && total > Number(partialStatus.split('/')[1].trim().split(' ')[0]),
    `search now pages through every match (${completeStatus}, was ${partialStatus})`);
  await page.screenshot({ path: join(results, 'firstview-complete.png') });
  check(pageErrors.length === 0, `no page errors (${pageErrors.join('; ')})`);
} catch (error) {
  failed = true;
  console.error(`firstview e2e: ${error instanceof Error ? error.stack : error}`);
} finally {
  await close();
}
console.log(failed ? 'firstview e2e FAILED' : 'firstview e2e passed');
process.exit(failed ? 1 : 0);
