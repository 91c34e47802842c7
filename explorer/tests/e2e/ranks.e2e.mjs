// End-to-end test of a merged multi-rank profile in the Explorer: two ranks of the tiny Llama, each
// tensor parallel over two NeuronCores, profiled by one process each and merged by `sightline merge`
// (run-e2e.sh makes it). Usage: node tests/e2e/ranks.e2e.mjs BASE_URL PROFILE   (PROFILE: the merged
// profile's name under the served directory). Checks that the timeline lists every rank's lanes
// (rank<r>/...) with each core's collective lane (CC:k), that the collectives line up across ranks and
// cores, that search finds a cc_running and its details show the collective's arguments, that the
// summary reports the collectives per rank and core (and the collective_wait insight when the server
// finds one), and that the summary's metrics (MFU/MBU, engines, executions, the rows per rank and the
// straggler) are there and equal `sightline view`'s (CLI_SUMMARY_JSON), and that a collective's chain
// (c10d op -> nrta_cc_schedule -> cc_running on each core) is one tree opened from either end. Usage: node tests/e2e/ranks.e2e.mjs
// BASE_URL PROFILE CLI_SUMMARY_JSON. Screenshots go to test-results/.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { check, launchBrowser, resultsDir } from './browser.mjs';

const [baseUrl, profile, cliSummaryPath] = process.argv.slice(2);
if (!baseUrl || !profile || !cliSummaryPath) {
  console.error('usage: ranks.e2e.mjs BASE_URL PROFILE CLI_SUMMARY_JSON');
  process.exit(2);
}
// `sightline view PROFILE --output-format summary-json` of the same merged profile (run-e2e.sh writes it).
const cli = JSON.parse(readFileSync(cliSummaryPath, 'utf8'));
const results = resultsDir();

const { context, close } = await launchBrowser('sightline-ranks-e2e');
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const consoleErrors = [];
  page.on('pageerror', (error) => consoleErrors.push(String(error)));
  page.setDefaultTimeout(15000);
  const shot = (name) => page.screenshot({ path: join(results, name), fullPage: true });
  const api = (path) => page.evaluate(async (p) => {
    const response = await fetch(p);
    if (!response.ok) throw new Error(`${p}: ${response.status} ${await response.text()}`);
    return response.json();
  }, path);

  await page.goto(`${baseUrl}#/p/${profile}`);
  await page.waitForSelector('[data-testid="system-timeline"]');
  await page.waitForFunction(() => (window.__explorer.drawnLanes?.lanes.length ?? 0) > 0);

  // What the server knows of the merge: the world size and, per rank and core, the collectives.
  const summary = await api(`/api/profiles/${profile}/summary`);
  const cc = summary.collectives;
  check(cc !== undefined && cc.world_size === 2 && cc.collectives > 0,
    `the summary of the merged profile has its collectives (${cc && `${cc.collectives} over world size ${cc.world_size}`})`);
  const ranks = [...new Set(cc.lanes.map((l) => l.rank))].sort();
  check(ranks.length === cc.world_size, `the collective table has every rank (${ranks.join(', ')})`);

  // ---- 1. Every rank's lanes on one timeline: framework, runtime and hardware, and each core's CC lane.
  const { groups, lanes } = await page.evaluate(() => window.__explorer.drawnLanes);
  for (const rank of ranks) {
    const own = lanes.filter((name) => name.startsWith(`rank${rank}/`));
    check(own.some((name) => name.includes('/framework/')) && own.some((name) => name.includes('/neuron_rt/')) &&
      own.some((name) => name.includes('/neuron_hw/')),
    `rank ${rank} has framework, runtime and hardware lanes (${own.length} lanes)`);
    check(groups.some((label) => label.startsWith(`rank${rank}/`)), `rank ${rank} has its own lane groups`);
    for (const core of cc.lanes.filter((l) => l.rank === rank).map((l) => l.core)) {
      check(own.some((name) => name.endsWith(`/neuron_hw/CC:${core}`)) && own.some((name) => name.endsWith(`/neuron_hw/NC:${core}`)),
        `rank ${rank} core ${core} has its collective lane CC:${core} beside NC:${core}`);
    }
  }
  check(lanes.every((name) => /^rank\d+\//.test(name)), 'every lane is under a rank');
  await shot('ranks-01-timeline.png');

  // ---- 2. The collectives line up: each collective ends on every core of every rank together.
  const matches = (await api(`/api/profiles/${profile}/search?q=cc_running&limit=1000`)).matches;
  check(matches.length === cc.collectives * cc.lanes.length,
    `cc_running: ${matches.length} events, one per collective (${cc.collectives}) and core of each rank (${cc.lanes.length})`);
  const byCollective = new Map();
  for (const match of matches) {
    const details = await api(`/api/profiles/${profile}/events/${match.id}`);
    const id = details.args['collective id'];
    if (!byCollective.has(id)) byCollective.set(id, []);
    byCollective.get(id).push({ lane: match.lane_name, end: match.ts + match.dur });
  }
  for (const [id, runs] of byCollective) {
    const ends = runs.map((r) => r.end);
    const lanesOf = new Set(runs.map((r) => r.lane));
    // Exactly together: times are whole nanoseconds, read exactly by the one trace reader and shifted
    // in integer nanoseconds by the merge (the bound only absorbs the page's double ts + dur).
    check(lanesOf.size === cc.lanes.length && Math.max(...ends) - Math.min(...ends) < 1e-6,
      `collective ${id} ends together on all ${lanesOf.size} CC lanes (spread ${(Math.max(...ends) - Math.min(...ends)).toFixed(4)} us)`);
  }

  // ---- 3. Search finds a collective, selects it, and its details show the collective's arguments.
  await page.fill('#search', 'cc_running');
  await page.press('#search', 'Enter');
  await page.waitForFunction((id) => window.__explorer.selected?.id === id &&
    document.querySelector('[data-testid="selected-name"]')?.textContent === 'cc_running', matches[0].id);
  const first = await api(`/api/profiles/${profile}/events/${matches[0].id}`);
  for (const arg of ['collective', 'collective id', 'algorithm', 'group size', 'bus bytes']) {
    const shown = await page.textContent(`[data-testid="details"] dd[data-arg="${arg}"]`);
    const value = first.args[arg];
    check(value !== undefined && shown === (typeof value === 'string' ? JSON.stringify(value) : String(value)),
      `the details show the collective's ${arg} (${shown})`);
  }
  const laneShown = await page.textContent('[data-testid="details"] dl');
  check(laneShown.includes(first.lane_name), `the details name its lane (${first.lane_name})`);
  // Enter steps to the first collective of the last rank.
  const last = ranks.at(-1);
  const index = matches.findIndex((m) => m.lane_name.startsWith(`rank${last}/`));
  for (let i = 1; i <= index; i++) await page.press('#search', 'Enter');
  await page.waitForFunction((id) => window.__explorer.selected?.id === id, matches[index].id);
  check((await page.evaluate(() => window.__explorer.selected.lane_name)).startsWith(`rank${last}/`),
    `Enter reaches rank ${last}'s collective (${matches[index].lane_name})`);
  await page.mouse.move(5, 5);
  await shot('ranks-02-collective.png');

  // ---- 4. The summary: the collectives per rank and core, and the collective_wait insight if it fired.
  await page.click('#tabs button[data-tab="summary"]');
  await page.waitForSelector('[data-testid="collectives"] tr[data-rank]');
  const rows = await page.$$eval('[data-testid="collectives"] tr[data-rank]',
    (trs) => trs.map((tr) => `${tr.dataset.rank}/${tr.dataset.core}`));
  check(rows.length === cc.lanes.length && cc.lanes.every((l) => rows.includes(`${l.rank}/${l.core}`)),
    `the summary's collectives table has every rank and core (${rows.join(', ')})`);
  const text = await page.textContent('[data-testid="collectives"]');
  check(text.includes(`${cc.collectives} collective(s)`) && text.includes('link peak'),
    'the collectives section says how many ran and the bandwidth against the link peak');
  const waits = summary.insights.filter((i) => i.id === 'collective_wait');
  if (waits.length > 0) {
    check(await page.isVisible('[data-insight="collective_wait"]'), `the collective_wait insight is shown (${waits[0].title})`);
  } else {
    const share = Math.max(...cc.lanes.map((l) => (l.span_us > 0 ? l.wait_us / l.span_us : 0)));
    check(!(await page.isVisible('[data-insight="collective_wait"]')),
      `no collective_wait insight, as the server found none (the longest wait is ${(100 * share).toFixed(1)}% of its core's span)`);
  }
  await shot('ranks-03-summary.png');

  // ---- 5. A merged profile is a full profile: its summary metrics are every rank's, equal to the CLI's.
  const skip = new Set(['insights', 'roofline', 'collectives']);
  const differing = Object.keys(cli).filter((key) => !skip.has(key) &&
    JSON.stringify(summary[key]) !== JSON.stringify(cli[key]));
  check(differing.length === 0 && Object.keys(cli).length > 10,
    `the served summary equals \`sightline view\`'s, every metric (${differing.join(', ') || `${Object.keys(cli).length} keys`})`);
  check(cli.executions > 0 && cli.mfu_estimated_percent > 0 && cli.mbu_estimated_percent > 0 && cli.total_time_us > 0,
    `the merged profile has metrics (${cli.executions} executions, MFU ${cli.mfu_estimated_percent.toFixed(3)} %, ` +
    `MBU ${cli.mbu_estimated_percent.toFixed(3)} %)`);
  const shownCount = async (selector) => Number((await page.textContent(selector)).replace(/[^0-9]/g, ''));
  check(await shownCount('tr[data-metric="executions"] td.num') === cli.executions,
    `the Summary tab shows the CLI's ${cli.executions} executions`);
  for (const key of ['mfu_estimated_percent', 'mbu_estimated_percent']) {
    const shown = Number.parseFloat(await page.textContent(`.gauge[data-metric="${key}"] .gauge-value`));
    check(Number.isFinite(shown) && shown > 0 && Math.abs(shown - cli[key]) <= 0.05 + 0.01 * cli[key],
      `the ${key.slice(0, 3).toUpperCase()} gauge shows ${shown} % (the CLI: ${cli[key]})`);
  }
  const bars = await page.$$eval('[data-testid="engine-bars"] .bar-row', (rows) => rows.map((r) => r.dataset.engine));
  check(bars.includes('tensor') && bars.includes('dma'), `the engine bars are drawn (${bars.join(', ')})`);
  const dmaShown = Number.parseFloat(await page.textContent('.bar-row[data-engine="dma"] .bar-value'));
  check(dmaShown > 0 && Math.abs(dmaShown - cli.dma_engine_active_time_percent) <= 0.05 + 0.01 * cli.dma_engine_active_time_percent,
    `the DMA bar shows ${dmaShown} % active (the CLI: ${cli.dma_engine_active_time_percent})`);
  // One row per rank, each the rank's executions as the CLI counts them, summing to the profile's.
  check(Array.isArray(cli.ranks) && cli.ranks.length === cc.world_size, `the CLI has a row per rank (${cli.ranks?.length})`);
  let rankExecutions = 0;
  for (const row of cli.ranks) {
    const shown = await shownCount(`[data-testid="ranks"] tr[data-rank="${row.rank}"] td[data-metric="executions"]`);
    check(shown === row.executions, `rank ${row.rank}'s row shows its ${row.executions} executions (${shown})`);
    rankExecutions += row.executions;
  }
  check(rankExecutions === cli.executions, `the ranks' executions sum to the profile's (${rankExecutions})`);
  const stragglerRank = await page.getAttribute('[data-testid="straggler"]', 'data-rank');
  check(stragglerRank === (cli.straggler.excess_us > 0 ? String(cli.straggler.rank) : ''),
    `the straggler is the CLI's (${cli.straggler.excess_us > 0 ? `rank ${cli.straggler.rank}` : 'none'})`);
  await page.locator('[data-testid="ranks"]').screenshot({ path: join(results, 'ranks-04-per-rank.png') });

  // ---- 6. The chain of a collective: c10d op -> nrta_cc_schedule per core -> cc_running, from either end.
  await page.click('#tabs button[data-tab="timeline"]');
  const treeOf = async (id) => {
    await page.evaluate((sel) => { location.hash = `#/p/${sel.profile}?sel=${sel.id}`; }, { profile, id });
    await page.waitForFunction((sel) => window.__explorer.chain?.selected.id === sel, id);
    return page.$$eval('[data-testid="chain-tree"] .tree-row', (rows) =>
      rows.map((r) => `${parseInt(r.style.paddingLeft, 10) / 18}:${r.querySelector('.layer').textContent}`));
  };
  const run = await api(`/api/profiles/${profile}/events/${matches[0].id}`);
  check(run.flows_in.length === 1 && run.flows_in[0].category === 'ac2g' && run.flows_in[0].event.name === 'nrta_cc_schedule',
    `cc_running's flow comes from its nrta_cc_schedule (${run.flows_in.map((f) => `${f.category} ${f.event.name}`).join(', ')})`);
  const schedule = await api(`/api/profiles/${profile}/events/${run.flows_in[0].event.id}`);
  const op = schedule.flows_in.find((f) => f.category === 'fwd')?.event;
  check(op !== undefined && op.name.startsWith('c10d::'), `nrta_cc_schedule's flow comes from the ${op?.name} op`);
  const fromRun = await treeOf(matches[0].id);
  const schedulesShown = fromRun.filter((row) => row === '1:nrta_cc_schedule').length;
  check(fromRun[0] === `0:${op.name}` && schedulesShown === cc.lanes.length / cc.world_size &&
    fromRun.filter((row) => row === '2:cc_running').length === schedulesShown,
  `opened from cc_running, the chain is ${op.name} -> a schedule -> a cc_running per core (${fromRun.join(' ')})`);
  const arrowsFromRun = await page.evaluate(() => window.__explorer.arrows());
  await shot('ranks-05-chain.png');
  const fromOp = await treeOf(op.id);
  const arrowsFromOp = await page.evaluate(() => window.__explorer.arrows());
  check(JSON.stringify(fromOp) === JSON.stringify(fromRun) && JSON.stringify(arrowsFromOp) === JSON.stringify(arrowsFromRun),
    `opened from ${op.name}, the chain is the same tree with the same arrows (${arrowsFromOp.length} arrows)`);

  check(consoleErrors.length === 0, `no uncaught page errors (${consoleErrors.join('; ')})`);
} catch (error) {
  failed = true;
  console.error(`not ok - ${error instanceof Error ? error.stack : error}`);
  for (const page of context.pages()) await page.screenshot({ path: join(results, 'ranks-failure.png'), fullPage: true }).catch(() => {});
} finally {
  await close();
}
console.log(failed ? 'ranks e2e FAILED' : 'ranks e2e passed');
process.exit(failed ? 1 : 0);
