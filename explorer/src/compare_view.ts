// Compare two profiles: pick A and B, see the ranked per-executable, per-op and per-engine deltas
// (sortable), and both system timelines stacked on one time axis, each aligned to its own start,
// panning and zooming together (docs/hardware-model.md §4.2, Profile Comparison).

import { api, type CompareAnswer, type LanesAnswer, type ProfileEntry } from './api';
import {
  COMPARE_COLUMNS, alignView, formatDelta, formatDeltaPercent, nextCompareSort, sharedSpan, sortCompareRows,
  speedupText, withRanks, type CompareSortKey, type RankedRow, type SortDirection,
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
    } catch (error) {
      // Not "Comparing…" forever: the panel says why (the error box says it too).
      const message = error instanceof Error ? error.message : String(error);
      this.tablePanel.innerHTML = `<p class="error" data-testid="compare-error">Cannot compare ${escapeHtml(a)} with ` +
        `${escapeHtml(b)}: ${escapeHtml(message)}</p>`;
      throw error;
    }
    this.answer = answer;
    this.rows = withRanks(answer.ranked);
    (this.container.querySelector('[data-testid="compare-totals"]') as HTMLElement).textContent =
      `device time ${formatDuration(answer.total_a_us)} → ${formatDuration(answer.total_b_us)} ` +
      `(${speedupText(answer.total_a_us, answer.total_b_us)})`;
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
    const body = rows.map((r) => `<tr class="delta-${r.status}" data-kind="${r.kind}" data-status="${r.status}">` +
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

  private async select(view: TimelineView, header: HTMLElement, id: number | undefined): Promise<void> {
    const label = header.querySelector('span.muted') as HTMLElement;
    if (id === undefined) {
      view.select(undefined);
      label.textContent = '';
      return;
    }
    const name = view === this.timelines[0] ? this.pick.a : this.pick.b;
    if (!name) return;
    const details = await api.event(name, id);
    view.select(details, [], false);
    label.textContent = `selected ${details.name}: ${formatDuration(details.dur)} at ` +
      `${formatDuration(details.ts - view.bounds.start)}`;
  }
}
