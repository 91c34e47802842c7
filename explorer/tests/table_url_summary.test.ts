import { describe, expect, it } from 'vitest';
import type { DeviceRow, KeyAverageRow } from '../src/api';
import { formatBytes, summarizeRange } from '../src/device_summary';
import { nextSort, sortRows } from '../src/table';
import { formatRoute, parseRoute } from '../src/url';

const row = (name: string, self_device_us: number, count: number): KeyAverageRow => ({
  name, count, cpu_total_us: 1, self_cpu_us: 1, device_total_us: self_device_us, self_device_us,
});

describe('operator table', () => {
  it('sorts by any column in both directions', () => {
    const rows = [row('aten::mul', 5, 2), row('aten::add', 9, 1), row('aten::mean', 1, 3)];
    expect(sortRows(rows, 'self_device_us', 'desc').map((r) => r.name)).toEqual(['aten::add', 'aten::mul', 'aten::mean']);
    expect(sortRows(rows, 'name', 'asc').map((r) => r.name)).toEqual(['aten::add', 'aten::mean', 'aten::mul']);
    expect(sortRows(rows, 'count', 'asc').map((r) => r.count)).toEqual([1, 2, 3]);
  });

  it('flips the direction on a second click', () => {
    expect(nextSort({ key: 'count', direction: 'desc' }, 'count')).toEqual({ key: 'count', direction: 'asc' });
    expect(nextSort({ key: 'count', direction: 'desc' }, 'name')).toEqual({ key: 'name', direction: 'asc' });
  });
});

describe('deep links', () => {
  it('round-trips a profile, a range and a selection', () => {
    const hash = formatRoute({ profile: 'naive run', start: 1.5, end: 20, selected: 42 });
    expect(parseRoute(hash)).toEqual({ profile: 'naive run', start: 1.5, end: 20, selected: 42 });
    expect(parseRoute('#/')).toEqual({});
    expect(parseRoute('#/p/x?start=5&end=1')).toEqual({ profile: 'x', start: undefined, end: undefined, selected: undefined });
  });
});

describe('device box selection', () => {
  it('sums active time, bytes and instructions inside the range', () => {
    const record = (start: number, dur: number) => ({
      start, dur, op: 0, opcode: 'dma_copy', hbm_read: 100, hbm_written: 0, onchip: 10, flops: 0, semaphore_wait: 0,
    });
    const rows: DeviceRow[] = [{ name: 'DMA q0', engine: 'dma', queue: 0, records: [record(0, 10), record(5, 10), record(50, 10)] }];
    const [summary] = summarizeRange(rows, 0, 20);
    expect(summary.instructions).toBe(2);
    expect(summary.activeNs).toBe(15); // overlapping records count once
    expect(summary.activePercent).toBe(75);
    expect(summary.hbmBytes).toBe(200);
    expect(formatBytes(2048)).toBe('2.0 KiB');
  });
});

describe('deep links to the new views', () => {
  it('round-trips a tab and a comparison with a range of the shared axis', () => {
    expect(parseRoute(formatRoute({ profile: 'naive', tab: 'summary' }))).toMatchObject({ profile: 'naive', tab: 'summary' });
    expect(formatRoute({ profile: 'naive', tab: 'timeline' })).toBe('#/p/naive');
    expect(parseRoute('#/p/naive?tab=bogus').tab).toBeUndefined();
    const hash = formatRoute({ compare: { a: 'naive', b: 'fused' }, start: 0, end: 120.5 });
    expect(hash).toBe('#/compare?a=naive&b=fused&start=0.000&end=120.500');
    expect(parseRoute(hash)).toMatchObject({ compare: { a: 'naive', b: 'fused' }, start: 0, end: 120.5 });
    expect(parseRoute('#/compare')).toMatchObject({ compare: { a: undefined, b: undefined } });
  });
});
