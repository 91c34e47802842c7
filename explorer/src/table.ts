// Operator table data: sorting key-average rows by any column.

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

export function sortRows(rows: readonly KeyAverageRow[], key: SortKey, direction: SortDirection): KeyAverageRow[] {
  const sign = direction === 'asc' ? 1 : -1;
  return [...rows].sort((a, b) => {
    const x = a[key];
    const y = b[key];
    const order = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
    return order * sign || a.name.localeCompare(b.name);
  });
}

// Clicking the sorted column flips its direction; another column starts descending (numbers) or
// ascending (names).
export function nextSort(current: { key: SortKey; direction: SortDirection }, clicked: SortKey) {
  if (current.key === clicked) return { key: clicked, direction: current.direction === 'asc' ? 'desc' : 'asc' } as const;
  return { key: clicked, direction: clicked === 'name' ? 'asc' : 'desc' } as const;
}
