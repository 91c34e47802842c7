// Compare two profiles (A = before, B = after, e.g. naive vs fused): the delta table's sorting and
// formatting, and the shared time axis of the two stacked timelines. Each timeline is aligned to its
// own start, so "t = 100 us" means 100 us into A and 100 us into B.

import type { CompareRow } from './api';
import { compareValues, toggleSort, type SortDirection } from './table';
import { formatDuration, type Viewport } from './timeline_math';

export type { SortDirection };

// 'rank' is the server's order: removed executables, then added ones, then by |delta| (analysis::compare).
export type CompareSortKey = 'rank' | 'kind' | 'name' | 'status' | 'count_a' | 'count_b' | 'time_a_ns' | 'time_b_ns' |
  'delta_ns' | 'delta_percent';

export const COMPARE_COLUMNS: { key: CompareSortKey; label: string; numeric: boolean }[] = [
  { key: 'rank', label: '#', numeric: true },
  { key: 'kind', label: 'Kind', numeric: false },
  { key: 'name', label: 'Name', numeric: false },
  { key: 'status', label: 'Status', numeric: false },
  { key: 'count_a', label: 'Count A', numeric: true },
  { key: 'count_b', label: 'Count B', numeric: true },
  { key: 'time_a_ns', label: 'Time A', numeric: true },
  { key: 'time_b_ns', label: 'Time B', numeric: true },
  { key: 'delta_ns', label: 'Delta (B − A)', numeric: true },
  { key: 'delta_percent', label: 'Delta %', numeric: true },
];

export interface RankedRow extends CompareRow {
  rank: number; // 1-based position in the server's answer
}

export function withRanks(rows: readonly CompareRow[]): RankedRow[] {
  return rows.map((row, index) => ({ ...row, rank: index + 1 }));
}

// Relative change of B against A; undefined when A has no time (an added row).
export function deltaPercent(row: CompareRow): number | undefined {
  return row.time_a_ns > 0 ? (100 * (row.time_b_ns - row.time_a_ns)) / row.time_a_ns : undefined;
}

function sortValue(row: RankedRow, key: CompareSortKey): number | string {
  if (key === 'delta_percent') return deltaPercent(row) ?? Number.POSITIVE_INFINITY;
  return row[key];
}

export function sortCompareRows(rows: readonly RankedRow[], key: CompareSortKey, direction: SortDirection): RankedRow[] {
  const sign = direction === 'asc' ? 1 : -1;
  return [...rows].sort((a, b) => compareValues(sortValue(a, key), sortValue(b, key)) * sign || a.rank - b.rank);
}

// Rank starts ascending (the server's order), text columns ascending, numbers descending; a second
// click on the sorted column flips it.
export function nextCompareSort(current: { key: CompareSortKey; direction: SortDirection }, clicked: CompareSortKey):
    { key: CompareSortKey; direction: SortDirection } {
  const numeric = COMPARE_COLUMNS.find((c) => c.key === clicked)?.numeric ?? false;
  return toggleSort(current, clicked, clicked === 'rank' || !numeric ? 'asc' : 'desc');
}

// "+12.345 us" / "−3.000 us": the sign always shown, a real minus sign for negatives.
export function formatDelta(ns: number): string {
  if (ns === 0) return '0';
  const text = formatDuration(Math.abs(ns) / 1000);
  return ns > 0 ? `+${text}` : `−${text}`;
}

export function formatDeltaPercent(row: CompareRow): string {
  const percent = deltaPercent(row);
  if (percent === undefined) return row.time_b_ns > 0 ? 'new' : '—';
  return `${percent > 0 ? '+' : percent < 0 ? '−' : ''}${Math.abs(percent).toFixed(1)}%`;
}

// Faster overall: "2.54x less device time" from the two totals.
export function speedupText(totalAUs: number, totalBUs: number): string {
  if (!(totalAUs > 0) || !(totalBUs > 0)) return 'n/a';
  const ratio = totalAUs / totalBUs;
  return ratio >= 1 ? `${ratio.toFixed(2)}x less device time in B` : `${(1 / ratio).toFixed(2)}x more device time in B`;
}

// The shared axis: time relative to each profile's start, as long as the longer of the two.
export function sharedSpan(a: Viewport, b: Viewport): number {
  return Math.max(a.end - a.start, b.end - b.start, 1);
}

// The same relative window on another timeline whose data starts at `toStart`.
export function alignView(view: Viewport, fromStart: number, toStart: number): Viewport {
  return { start: view.start - fromStart + toStart, end: view.end - fromStart + toStart };
}

export interface ExecutionStats {
  count: number;
  busyUs: number; // union of the executions' time
  spanUs: number; // first start to last end
  idleUs: number; // span minus busy: the gaps between executions
  largestGapUs: number;
}

// What the device did over a profile's executions: busy, span and the idle gaps between them
// (overlapping executions count once).
export function executionStats(executions: readonly { ts: number; dur: number }[]): ExecutionStats {
  const sorted = [...executions].sort((x, y) => x.ts - y.ts);
  if (sorted.length === 0) return { count: 0, busyUs: 0, spanUs: 0, idleUs: 0, largestGapUs: 0 };
  let busy = 0;
  let largestGap = 0;
  let runStart = sorted[0].ts;
  let runEnd = sorted[0].ts + sorted[0].dur;
  for (const e of sorted.slice(1)) {
    if (e.ts > runEnd) {
      busy += runEnd - runStart;
      largestGap = Math.max(largestGap, e.ts - runEnd);
      runStart = e.ts;
    }
    runEnd = Math.max(runEnd, e.ts + e.dur);
  }
  busy += runEnd - runStart;
  const span = runEnd - sorted[0].ts;
  return { count: sorted.length, busyUs: busy, spanUs: span, idleUs: Math.max(0, span - busy), largestGapUs: largestGap };
}
