import { describe, expect, it } from 'vitest';
import type { CompareRow } from '../src/api';
import {
  alignView, deltaPercent, formatDelta, formatDeltaPercent, nextCompareSort, sharedSpan, sortCompareRows, speedupText,
  withRanks,
} from '../src/compare';

const row = (kind: CompareRow['kind'], name: string, a: number, b: number, countA = 1, countB = 1): CompareRow => ({
  kind, name, count_a: countA, count_b: countB, time_a_ns: a, time_b_ns: b, delta_ns: b - a,
  status: countB === 0 ? 'removed' : countA === 0 ? 'added' : 'changed',
});

// The server's order: removed executables, added executables, then by |delta|.
const ranked = withRanks([
  row('executable', 'mul_a', 23000, 0, 1, 0),
  row('executable', 'rsqrt', 2900, 0, 1, 0),
  row('executable', 'rms_norm', 0, 9000, 0, 1),
  row('op', 'aten::mul', 59000, 0, 3, 0),
  row('engine', 'Vector', 10700, 4000, 26, 9),
]);

describe('compare table', () => {
  it('keeps the server rank and sorts by any column', () => {
    expect(ranked.map((r) => r.rank)).toEqual([1, 2, 3, 4, 5]);
    expect(sortCompareRows(ranked, 'rank', 'asc').map((r) => r.name)[0]).toBe('mul_a');
    expect(sortCompareRows(ranked, 'delta_ns', 'asc').map((r) => r.name)).toEqual(
      ['aten::mul', 'mul_a', 'Vector', 'rsqrt', 'rms_norm']);
    expect(sortCompareRows(ranked, 'name', 'asc').map((r) => r.name)).toEqual(
      ['aten::mul', 'mul_a', 'rms_norm', 'rsqrt', 'Vector']);
    // Ties keep the server's order.
    expect(sortCompareRows(ranked, 'status', 'asc').map((r) => r.name)).toEqual(
      ['rms_norm', 'Vector', 'mul_a', 'rsqrt', 'aten::mul']);
    // Rows new in B have no relative change and sort after every finite one, ascending.
    expect(sortCompareRows(ranked, 'delta_percent', 'asc').at(-1)?.name).toBe('rms_norm');
  });

  it('starts numbers descending, text and rank ascending, and flips on a second click', () => {
    expect(nextCompareSort({ key: 'rank', direction: 'asc' }, 'delta_ns')).toEqual({ key: 'delta_ns', direction: 'desc' });
    expect(nextCompareSort({ key: 'delta_ns', direction: 'desc' }, 'name')).toEqual({ key: 'name', direction: 'asc' });
    expect(nextCompareSort({ key: 'name', direction: 'asc' }, 'name')).toEqual({ key: 'name', direction: 'desc' });
    expect(nextCompareSort({ key: 'name', direction: 'asc' }, 'rank')).toEqual({ key: 'rank', direction: 'asc' });
  });

  it('formats deltas with their sign', () => {
    expect(formatDelta(-23000)).toBe('−23.000 us');
    expect(formatDelta(9000)).toBe('+9.000 us');
    expect(formatDelta(0)).toBe('0');
    expect(deltaPercent(ranked[4])).toBeCloseTo(-62.6, 1);
    expect(formatDeltaPercent(ranked[4])).toBe('−62.6%');
    expect(formatDeltaPercent(ranked[2])).toBe('new');
    expect(formatDeltaPercent(ranked[0])).toBe('−100.0%');
    expect(speedupText(82, 20.5)).toBe('4.00x less device time in B');
    expect(speedupText(10, 20)).toBe('2.00x more device time in B');
    expect(speedupText(0, 20)).toBe('n/a');
  });
});

describe('shared time axis', () => {
  it('spans the longer profile and keeps a window at the same offset from each start', () => {
    expect(sharedSpan({ start: 100, end: 700 }, { start: 5000, end: 5200 })).toBe(600);
    const view = { start: 150, end: 250 }; // 50..150 us into A
    expect(alignView(view, 100, 5000)).toEqual({ start: 5050, end: 5150 });
    expect(alignView(alignView(view, 100, 5000), 5000, 100)).toEqual(view);
  });
});
