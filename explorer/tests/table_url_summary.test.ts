import { describe, expect, it } from 'vitest';
import type { DeviceRow, KeyAverageRow } from '../src/api';
import { formatBytes, summarizeRange } from '../src/device_summary';
import { cellValue, nextSort, sortRows } from '../src/table';
import { formatRoute, parseRoute } from '../src/url';

// Cells as the profiler's table prints them: Name, Self NEURON, # of Calls.
const row = (name: string, self_device: string, count: number): KeyAverageRow => ({
  name, count, cpu_total_us: 1, self_cpu_us: 1, device_total_us: 0, self_device_us: 0, cells: [name, self_device, `${count}`],
});

describe('operator table', () => {
  it('sorts by any column in both directions, on the value each cell shows', () => {
    const rows = [row('aten::mul', '5.000us', 2), row('aten::add', '1.200ms', 1), row('aten::mean', '900.000us', 3)];
    expect(sortRows(rows, 1, 'desc').map((r) => r.name)).toEqual(['aten::add', 'aten::mean', 'aten::mul']);
    expect(sortRows(rows, 0, 'asc').map((r) => r.name)).toEqual(['aten::add', 'aten::mean', 'aten::mul']);
    expect(sortRows(rows, 2, 'asc').map((r) => r.count)).toEqual([1, 2, 3]);
    expect(sortRows(rows, -1, 'desc').map((r) => r.name)).toEqual(['aten::mul', 'aten::add', 'aten::mean']);
  });

  it('reads the units of torch\'s table', () => {
    expect(cellValue('2.000s')).toBe(2e6);
    expect(cellValue('51.500us')).toBe(51.5);
    expect(cellValue('12.34%')).toBe(12.34);
    expect(cellValue('1.50 KB')).toBe(1536);
    expect(cellValue('-4.00 MB')).toBe(-4 * 1024 * 1024);
    expect(cellValue('NaN')).toBe(-Infinity);
    expect(cellValue('[[128, 256], []]')).toBe('[[128, 256], []]');
  });

  it('flips the direction on a second click', () => {
    expect(nextSort({ key: 2, direction: 'desc' }, 2)).toEqual({ key: 2, direction: 'asc' });
    expect(nextSort({ key: 2, direction: 'desc' }, 0)).toEqual({ key: 0, direction: 'asc' });
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
