// Table sorting: key-average rows by any column, and the ordering rules the other tables share.

import type { KeyAverageRow } from './api';

export type SortKey = keyof KeyAverageRow;
export type SortDirection = 'asc' | 'desc';

export const COLUMNS: { key: SortKey; label: string; numeric: boolean }[] = [
  { key: 'name', label: 'Name', numeric: false },
  { key: 'self_cpu_us', label: 'Self CPU', numeric: true },
  { key: 'cpu_total_us', label: 'CPU total', numeric: true },
  { key: 'self_device_us', label: 'Self NEURON', numeric: true },
  { key: 'device_total_us', label: 'NEURON total', numeric: true },
  { key: 'count', label: '# of Calls', numeric: true },
];

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

export function sortRows(rows: readonly KeyAverageRow[], key: SortKey, direction: SortDirection): KeyAverageRow[] {
  const sign = direction === 'asc' ? 1 : -1;
  return [...rows].sort((a, b) => compareValues(a[key], b[key]) * sign || collator.compare(a.name, b.name));
}

// Numbers start descending, names ascending.
export function nextSort(current: { key: SortKey; direction: SortDirection }, clicked: SortKey) {
  return toggleSort(current, clicked, clicked === 'name' ? 'asc' : 'desc');
}
