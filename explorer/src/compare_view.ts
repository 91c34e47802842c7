// Compare two profiles: pick A and B, see the ranked per-executable, per-op and per-engine deltas
// (sortable), and both system timelines stacked on one time axis, each aligned to its own start,
// panning and zooming together (docs/hardware-model.md §4.2, Profile Comparison).

import { api, type CompareAnswer, type EventDetails, type EventSummary, type LanesAnswer, type ProfileEntry } from './api';
import {
  COMPARE_COLUMNS, alignView, executionStats, formatDelta, formatDeltaPercent, nextCompareSort, sharedSpan, sortCompareRows,
  speedupText, withRanks, type CompareSortKey, type ExecutionStats, type RankedRow, type SortDirection,
} from './compare';
import { escapeHtml } from './html';
import { formatDuration, type Viewport } from './timeline_math';
import { TimelineView } from './timeline_view';

export interface ComparePick {
  a?: string;
  b?: string;
  range?: Viewport; // microseconds from each profile's start
}

export interface CompareCallbacks {
  onPick(a: string, b: string): void; // the user chose a pair to compare
  onRangeChange(range: Viewport): void; // the shared axis moved (for the deep link)
  track<T>(promise: Promise<T>): Promise<T | undefined>;
}

export class CompareView {
  timelines: TimelineView[] = [];
  private rows: RankedRow[] = [];
  private sort: { key: CompareSortKey; direction: SortDirection } = { key: 'rank', direction: 'asc' };
  private readonly tablePanel: HTMLElement;
  private readonly timelinesPanel: HTMLElement;
  answer?: CompareAnswer;
  private executions: EventSummary[][] = [[], []]; // each side's nc_exec_running events, by start
  private readonly executionDetails = new Map<string, Promise<EventDetails>>();

  constructor(
    private readonly container: HTMLElement,
    profiles: readonly ProfileEntry[],
    readonly pick: ComparePick,
    private readonly callbacks: CompareCallbacks,
  ) {
    const usable = profiles.filter((p) => p.ok).map((p) => p.name);
    const options = (selected?: string) => usable.map((name) =>
      `<option value="${escapeHtml(name)}"${name === selected ? ' selected' : ''}>${escapeHtml(name)}</option>`).join('');
    container.innerHTML = `<div class="compare" data-testid="compare">
      <form class="compare-pick"><label>A (before) <select name="a">${options(pick.a ?? usable[0])}</select></label>
        <label>B (after) <select name="b">${options(pick.b ?? usable[1] ?? usable[0])}</select></label>
        <button type="submit">Compare</button>
        <button type="button" data-testid="compare-fit" title="Show both profiles whole">Fit</button><span class="compare-totals" data-testid="compare-totals"></span></form>
      <div class="compare-table"></div><div class="compare-timelines"></div></div>`;
    this.tablePanel = container.querySelector('.compare-table') as HTMLElement;
    this.timelinesPanel = container.querySelector('.compare-timelines') as HTMLElement;
    const form = container.querySelector('form') as HTMLFormElement;
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const data = new FormData(form);
      this.callbacks.onPick(String(data.get('a') ?? ''), String(data.get('b') ?? ''));
    });
    (container.querySelector('[data-testid="compare-fit"]') as HTMLButtonElement).addEventListener('click',
      () => this.timelines[0]?.fitAll());
    if (usable.length < 2) {
      this.tablePanel.innerHTML = '<p class="muted">Compare needs two readable profiles; upload another one first.</p>';
    }
  }

  // Loads the comparison and both timelines' lanes, then draws them.
  async load(): Promise<void> {
    const { a, b } = this.pick;
    if (!a || !b) return;
    this.tablePanel.innerHTML = '<p class="muted">Comparing…</p>';
    let answer: CompareAnswer;
    let lanesA: LanesAnswer;
    let lanesB: LanesAnswer;
    try {
      [answer, lanesA, lanesB] = await Promise.all([api.compare(a, b), api.lanes(a), api.lanes(b)]);
      // Each side's executions (the server's most per request): span and idle gaps, and what an
      // executable's row clicks through to.
      this.executions = await Promise.all([a, b].map(async (name) =>
        (await api.search(name, 'nc_exec_running', 10000)).matches.filter((e) => e.name === 'nc_exec_running')));
    } catch (error) {
      // Not "Comparing…" forever: the panel says why (the error box says it too).
      const message = error instanceof Error ? error.message : String(error);
      this.tablePanel.innerHTML = `<p class="error" data-testid="compare-error">Cannot compare ${escapeHtml(a)} with ` +
        `${escapeHtml(b)}: ${escapeHtml(message)}</p>`;
      throw error;
    }
    this.answer = answer;
    this.rows = withRanks(answer.ranked);
    const [statsA, statsB] = this.executions.map((list) => executionStats(list)) as [ExecutionStats, ExecutionStats];
    (this.container.querySelector('[data-testid="compare-totals"]') as HTMLElement).innerHTML =
      `device time ${formatDuration(answer.total_a_us)} → ${formatDuration(answer.total_b_us)} ` +
      `(${escapeHtml(speedupText(answer.total_a_us, answer.total_b_us))}) · <span data-testid="compare-span">span ` +
      `${formatDuration(statsA.spanUs)} → ${formatDuration(statsB.spanUs)} (${spanRatio(statsA.spanUs, statsB.spanUs)})</span> · ` +
      `<span data-testid="compare-idle">idle gaps ${formatDuration(statsA.idleUs)} → ${formatDuration(statsB.idleUs)} ` +
      `(largest ${formatDuration(statsA.largestGapUs)} → ${formatDuration(statsB.largestGapUs)})</span> · ` +
      `executions ${statsA.count} → ${statsB.count}`;
    this.renderTable();
    this.renderTimelines(a, lanesA, b, lanesB);
  }

  handleKey(event: KeyboardEvent): boolean {
    return this.timelines[0]?.handleKey(event) ?? false;
  }

  private renderTable(): void {
    const rows = sortCompareRows(this.rows, this.sort.key, this.sort.direction);
    const arrow = (key: CompareSortKey) => (this.sort.key === key ? (this.sort.direction === 'asc' ? ' ▲' : ' ▼') : '');
    const head = COMPARE_COLUMNS.map((c) =>
      `<th class="sortable${c.numeric ? ' num' : ''}" data-key="${c.key}">${c.label}${arrow(c.key)}</th>`).join('');
    const body = rows.map((r) => `<tr class="delta-${r.status}${r.kind === 'engine' ? '' : ' clickable'}" data-kind="${r.kind}" ` +
      `data-status="${r.status}" data-rank="${r.rank}">` +
      `<td class="num">${r.rank}</td><td>${r.kind}</td><td class="name" title="${escapeHtml(r.name)}">${escapeHtml(r.name)}</td>` +
      `<td><span class="status ${r.status}">${r.status}</span></td><td class="num">${r.count_a}</td>` +
      `<td class="num">${r.count_b}</td><td class="num">${formatDuration(r.time_a_ns / 1000)}</td>` +
      `<td class="num">${formatDuration(r.time_b_ns / 1000)}</td>` +
      `<td class="num ${r.delta_ns < 0 ? 'better' : r.delta_ns > 0 ? 'worse' : ''}">${formatDelta(r.delta_ns)}</td>` +
      `<td class="num">${formatDeltaPercent(r)}</td></tr>`).join('');
    this.tablePanel.innerHTML = `<table class="grid" data-testid="compare-table"><tr>${head}</tr>${body}</table>`;
    this.tablePanel.querySelectorAll<HTMLElement>('th[data-key]').forEach((th) =>
      th.addEventListener('click', () => {
        this.sort = nextCompareSort(this.sort, th.dataset.key as CompareSortKey);
        this.renderTable();
      }));
    this.tablePanel.querySelectorAll<HTMLElement>('tr[data-rank]').forEach((tr) =>
      tr.addEventListener('click', () => {
        const row = this.rows.find((r) => r.rank === Number(tr.dataset.rank));
        if (row && row.kind !== 'engine') void this.callbacks.track(this.showRow(row));
      }));
  }

  // A row clicked: its first event on each side (an op by name, an executable by its executions'
  // "executable" argument) is selected there; the shared axis moves to the first found, A before B.
  private async showRow(row: RankedRow): Promise<void> {
    const names = [this.pick.a, this.pick.b];
    const found = await Promise.all(this.timelines.map(async (_view, side) => {
      const name = names[side];
      if (!name) return undefined;
      if (row.kind === 'op') {
        const answer = await api.search(name, row.name, 50);
        return answer.matches.find((m) => m.name === row.name);
      }
      for (const execution of this.executions[side].slice(0, 500)) {
        const key = `${side}:${execution.id}`;
        let details = this.executionDetails.get(key);
        if (!details) {
          details = api.event(name, execution.id);
          this.executionDetails.set(key, details);
        }
        if ((await details).args['executable'] === row.name) return execution;
      }
      return undefined;
    }));
    let revealed = false;
    for (const [side, event] of found.entries()) {
      const view = this.timelines[side];
      const header = view?.container.previousElementSibling as HTMLElement | null;
      if (!view || !header) continue;
      if (!event) {
        view.select(undefined);
        (header.querySelector('span.muted') as HTMLElement).textContent = `no ${row.name} here`;
        continue;
      }
      await this.select(view, header, event.id, !revealed);
      revealed = true;
    }
  }

  private renderTimelines(a: string, lanesA: LanesAnswer, b: string, lanesB: LanesAnswer): void {
    this.timelinesPanel.innerHTML = '';
    const span = sharedSpan(lanesA, lanesB);
    const range = this.pick.range;
    const sides: [string, string, LanesAnswer][] = [['A', a, lanesA], ['B', b, lanesB]];
    this.timelines = sides.map(([side, name, lanes], index) => {
      const header = document.createElement('div');
      header.className = 'compare-side';
      header.innerHTML = `<b>${side}</b> ${escapeHtml(name)} <span class="muted" data-testid="compare-selection-${side}"></span>`;
      const wrap = document.createElement('div');
      wrap.className = 'timeline-wrap compare-wrap';
      this.timelinesPanel.append(header, wrap);
      const initial = range ? { start: lanes.start + range.start, end: lanes.start + range.end } : undefined;
      const view: TimelineView = new TimelineView(wrap, name, lanes, {
        onSelect: (id) => void this.callbacks.track(this.select(view, header, id)),
        onViewChange: (changed) => this.follow(index, changed),
      }, { initial, span, testid: `compare-timeline-${side.toLowerCase()}` });
      return view;
    });
    // Both start on the same relative window even when one profile is shorter than the other.
    const first = this.timelines[0];
    this.follow(0, first.view);
  }

  private follow(leader: number, view: Viewport): void {
    const from = this.timelines[leader];
    if (!from) return;
    this.timelines.forEach((other, index) => {
      if (index !== leader) other.setView(alignView(view, from.bounds.start, other.bounds.start), false);
    });
    this.callbacks.onRangeChange({ start: view.start - from.bounds.start, end: view.end - from.bounds.start });
  }

  private async select(view: TimelineView, header: HTMLElement, id: number | undefined, reveal = false): Promise<void> {
    const label = header.querySelector('span.muted') as HTMLElement;
    if (id === undefined) {
      view.select(undefined);
      label.textContent = '';
      return;
    }
    const name = view === this.timelines[0] ? this.pick.a : this.pick.b;
    if (!name) return;
    const details = await api.event(name, id);
    view.select(details, [], reveal);
    label.textContent = `selected ${details.name}: ${formatDuration(details.dur)} at ` +
      `${formatDuration(details.ts - view.bounds.start)}`;
  }
}

function spanRatio(a: number, b: number): string {
  if (!(a > 0) || !(b > 0)) return 'no executions on one side';
  return a >= b ? `${(a / b).toFixed(2)}x shorter in B` : `${(b / a).toFixed(2)}x longer in B`;
}
