// The Explorer's numbers against the CLI's and the live profiler's, in headless chromium. Usage:
// node tests/e2e/numbers.e2e.mjs BASE_URL PROFILE_ROOT SIGHTLINE STUDY_LOG
// (BASE_URL as the server printed it; PROFILE_ROOT holds the RMSNorm study's naive, fused and compiled
// profiles and a generated profile "large"; SIGHTLINE is the CLI; STUDY_LOG the study's output, run with
// --row-limit -1, which holds the live key_averages table of each variant).
//
// 1. The operator table: for each of the study's three profiles, the Explorer's header, cells and footer
//    are `sightline table --sort-by self_neuron_time_total --row-limit -1` and the live table, byte for byte.
// 2. One population: on "large", whose trace.json holds far more executions than were captured, the
//    summary's insights count the executions its metrics count (they counted the trace's before).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { check, launchBrowser, resultsDir } from './browser.mjs';

const [baseUrl, profileRoot, sightline, studyLog] = process.argv.slice(2);
if (!baseUrl || !profileRoot || !sightline || !studyLog) {
  console.error('usage: numbers.e2e.mjs BASE_URL PROFILE_ROOT SIGHTLINE STUDY_LOG');
  process.exit(2);
}
const results = resultsDir();

// A key_averages text table as cells. The dashed separator gives each column's width; a cell is padded
// to its width (right-aligned; Source Location left) and followed by two spaces, and one wider than its
// column (torch's "Self NEURON %" in 12) pushes the rest of its line right, as torch prints it. So a
// line is read column by column from where the last cell ended. Returns the header, the rows and the
// lines under the table.
export function parseTable(lines) {
  const separators = lines.flatMap((line, i) => (/^-+(?: {2}-+)* {2}$/.test(line) ? [i] : []));
  if (separators.length < 3) throw new Error(`not a key_averages table:\n${lines.join('\n')}`);
  const widths = [...lines[separators[0]].matchAll(/-+/g)].map((m) => m[0].length);
  const cells = (line) => {
    let at = 0;
    return widths.map((width) => {
      let end = Math.min(line.length, at + width);
      if (end < line.length && line[end] !== ' ') end = line.indexOf('  ', end) < 0 ? line.length : line.indexOf('  ', end);
      const cell = line.slice(at, end).trim();
      at = end + 2;
      return cell;
    });
  };
  return {
    headers: cells(lines[separators[0] + 1]),
    rows: lines.slice(separators[1] + 1, separators[2]).map(cells),
    footer: lines.slice(separators[2] + 1).filter((line) => line.length > 0),
  };
}

// The live table of each variant in the study's output: "== NAME ==" then the table, up to the line
// after its footer that is not one.
function liveTables(text) {
  const tables = new Map();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i += 1) {
    const heading = /^== (\w+) ==$/.exec(lines[i]);
    if (!heading) continue;
    let end = i + 1;
    let dashes = 0;
    while (end < lines.length && dashes < 3) dashes += /^-+( {2}-+)* {2}$/.test(lines[end++]) ? 1 : 0;
    while (end < lines.length && /^(Self .* time total: |Dropped events: |Note: )/.test(lines[end])) end += 1;
    tables.set(heading[1], { text: `${lines.slice(i + 1, end).join('\n')}\n`, ...parseTable(lines.slice(i + 1, end)) });
  }
  return tables;
}

const { context, close } = await launchBrowser('sightline-e2e-numbers');
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const consoleErrors = [];
  page.on('pageerror', (error) => consoleErrors.push(String(error)));
  page.setDefaultTimeout(30000);

  // ---- 1. Three tables that agree byte for byte.
  const live = liveTables(readFileSync(studyLog, 'utf8'));
  for (const name of ['naive', 'fused', 'compiled']) {
    check(live.has(name), `the study printed the live table of ${name}`);
    const cliText = execFileSync(sightline, ['table', join(profileRoot, name), '--sort-by', 'self_neuron_time_total',
      '--row-limit', '-1'], { encoding: 'utf8' });
    const cli = parseTable(cliText.split('\n'));
    await page.goto(`${baseUrl}#/p/${name}?tab=operators`);
    await page.waitForSelector('[data-testid="operator-table"] tr[data-name]');
    const explorer = await page.evaluate(() => ({
      headers: [...document.querySelectorAll('[data-testid="operator-table"] th')].map((th) => th.dataset.key),
      rows: [...document.querySelectorAll('[data-testid="operator-table"] tr[data-name]')]
        .map((tr) => [...tr.children].map((td) => td.textContent)),
      footer: document.querySelector('[data-testid="operator-footer"]').innerText.split('\n').filter((l) => l.length > 0),
    }));
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const { text: liveText, ...liveCells } = live.get(name);
    check(cliText === liveText && same(cli, liveCells), `${name}: sightline table is the live table (${cli.rows.length} rows)`);
    check(same(explorer.headers, cli.headers), `${name}: the Explorer's columns are the table's (${explorer.headers.join(' | ')})`);
    check(same(explorer.rows, cli.rows),
      `${name}: the Explorer's ${explorer.rows.length} rows hold the table's cells byte for byte ` +
      `(first: ${explorer.rows[0]?.join(' | ')}; table: ${cli.rows[0]?.join(' | ')})`);
    check(same(explorer.footer, cli.footer), `${name}: and its footer (${explorer.footer.join('; ')})`);
    if (name === 'naive') await page.screenshot({ path: join(results, '05-operator-table.png'), fullPage: true });
  }

  // ---- 2. One population for the summary's metrics and insights.
  await page.goto(`${baseUrl}#/p/large?tab=summary`);
  await page.waitForSelector('[data-metric="executions"]');
  const summary = await page.evaluate(async () => (await fetch('/api/profiles/large/summary')).json());
  const lanes = await page.evaluate(async () => (await fetch('/api/profiles/large/lanes')).json());
  const hardware = lanes.lanes.filter((l) => l.name.includes('/neuron_hw/'));
  check(summary.executions > 0, `the summary counts ${summary.executions} captured executions`);
  const countOf = (i) => Number(/(\d+) executions/.exec(`${i.title} ${i.evidence}`)?.[1]);
  const counting = summary.insights.filter((i) => Number.isFinite(countOf(i)));
  check(counting.length > 0, `its insights count executions (${counting.map((i) => `${i.id}: ${countOf(i)}`).join(', ')})`);
  const perCore = counting.filter((i) => i.id === 'idle_gaps').map(countOf);
  const total = counting.filter((i) => i.id === 'tiny_executions').map(countOf);
  // The generated steps leave the device idle between executions on both cores: the idle_gaps insight
  // must be there (counted over the captured executions), not left out for want of the trace.
  check(perCore.length > 0 && total.length === 1 && total[0] === summary.executions &&
    perCore.reduce((a, b) => a + b, 0) <= summary.executions,
    `every insight counts within the metrics' ${summary.executions} executions (idle_gaps per core: ${perCore.join(', ')}; ` +
    `tiny_executions: ${total.join(', ')}), on a profile of ${hardware.length} hardware lanes`);
  const shown = await page.textContent('[data-metric="executions"]');
  const evidence = await page.$$eval('[data-testid="insights"] li.insight', (items) => items.map((i) =>
    [...i.querySelectorAll('.insight-head b, :scope > div:not(.insight-head)')].map((e) => e.textContent).join(' ')));
  const inPage = evidence.flatMap((e) => [...e.matchAll(/([\d,]+) executions/g)].map((m) => Number(m[1].replaceAll(',', ''))));
  check(inPage.length > 0 && inPage.every((n) => n <= summary.executions),
    `the page's insights count no more executions than its Executions metric (${shown.trim()}; insights: ${inPage.join(', ')})`);
  check(consoleErrors.length === 0, `no uncaught page errors (${consoleErrors.join('; ')})`);
} catch (error) {
  failed = true;
  console.error(`not ok - ${error instanceof Error ? error.stack : error}`);
  for (const page of context.pages()) await page.screenshot({ path: join(results, 'failure-numbers.png'), fullPage: true }).catch(() => {});
} finally {
  await close();
}
console.log(failed ? 'e2e numbers FAILED' : 'e2e numbers passed');
process.exit(failed ? 1 : 0);
