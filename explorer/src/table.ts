// The operator table: `sightline table`'s columns and cells as the server sends them (the profiler's own
// formatting, so each cell is the CLI's text byte for byte), sorted by any column on the value a cell
// shows, and the ordering rules the other tables share.

import type { KeyAverageRow } from './api';

// A column of the table, by its index in the answer's headers; -1 keeps the server's order (the
// CLI's: self device time, descending).
export type SortKey = number;
export type SortDirection = 'asc' | 'desc';

// Ascending order of two cell values: numbers by value (infinities included), anything else as text.
// One collator for every comparison: String.localeCompare set one up per call, and sorting 13,000 rows
// by name took seconds.
const collator = new Intl.Collator();

export function compareValues(x: unknown, y: unknown): number {
  if (typeof x === 'number' && typeof y === 'number') return x === y ? 0 : x < y ? -1 : 1;
  return collator.compare(String(x), String(y));
}

// Clicking the sorted column flips its direction; another column starts in `initial`.
export function toggleSort<K>(current: { key: K; direction: SortDirection }, clicked: K, initial: SortDirection):
    { key: K; direction: SortDirection } {
  if (current.key === clicked) return { key: clicked, direction: current.direction === 'asc' ? 'desc' : 'asc' };
  return { key: clicked, direction: initial };
}

// The scales of the table's units: torch's _format_time (s, ms, us), _format_time_share (%) and
// _format_memory (B, KB, MB, GB, 1024-based).
const UNITS: Record<string, number> = { s: 1e6, ms: 1e3, us: 1, '%': 1, B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 };
const CELL_NUMBER = /^\s*(-?\d+(?:\.\d+)?)\s*(s|ms|us|%|B|KB|MB|GB)?\s*$/;

// What a cell sorts by: its number in one unit for times, shares, sizes and counts ("NaN", torch's share
// of a zero total, sorts lowest), the text otherwise (names, input shapes, source locations).
export function cellValue(text: string): number | string {
  if (text === 'NaN') return -Infinity;
  const match = CELL_NUMBER.exec(text);
  if (!match) return text;
  return Number(match[1]) * (match[2] ? UNITS[match[2]] : 1);
}

// Names ascending, every other column descending first.
export function nextSort(current: { key: SortKey; direction: SortDirection }, clicked: SortKey) {
  return toggleSort(current, clicked, clicked === 0 ? 'asc' : 'desc');
}

export function sortRows(rows: readonly KeyAverageRow[], key: SortKey, direction: SortDirection): KeyAverageRow[] {
  if (key < 0) return direction === 'desc' ? [...rows] : [...rows].reverse();
  const sign = direction === 'asc' ? 1 : -1;
  // Each cell parsed once, not once per comparison.
  const keyed = rows.map((row, index) => ({ row, index, value: cellValue(row.cells[key] ?? '') }));
  keyed.sort((a, b) => compareValues(a.value, b.value) * sign || a.index - b.index);
  return keyed.map((k) => k.row);
}
