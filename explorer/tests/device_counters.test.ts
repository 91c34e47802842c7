import { describe, expect, it } from 'vitest';
import type { DeviceRecord, DeviceRow } from '../src/api';
import { colourKey, counterTracks, legendKeys } from '../src/device_summary';

const rec = (start: number, dur: number, op: number, opcode: string, hbm = 0): DeviceRecord => ({
  start, dur, op, opcode, hbm_read: hbm, hbm_written: 0, onchip: 0, flops: 0, semaphore_wait: 0,
});
const rows: DeviceRow[] = [
  { name: 'Vector', engine: 'vector', queue: -1, records: [rec(0, 50, 0, 'TensorTensor'), rec(50, 50, 1, 'Activation')] },
  { name: 'Tensor', engine: 'tensor', queue: -1, records: [] },
  { name: 'DMA q0', engine: 'dma', queue: 0, records: [rec(0, 100, -1, 'dma', 1000)] },
  { name: 'DMA q1', engine: 'dma', queue: 1, records: [rec(50, 50, 0, 'dma', 500)] },
];

describe('device timeline colours', () => {
  it('colours by source op, engine or opcode, with a legend for each', () => {
    const ops = ['aten::mul', 'aten::add'];
    expect(colourKey('op', rows[0].records[1], rows[0], ops)).toBe('aten::add');
    expect(colourKey('engine', rows[0].records[1], rows[0], ops)).toBe('vector');
    expect(colourKey('opcode', rows[0].records[1], rows[0], ops)).toBe('Activation');
    expect(legendKeys('op', rows, ops)).toEqual(['aten::mul', 'aten::add', 'dma']);
    expect(legendKeys('engine', rows, ops)).toEqual(['vector', 'dma']);
    expect(legendKeys('opcode', rows, ops)).toEqual(['TensorTensor', 'Activation', 'dma']);
  });
});

describe('counter tracks', () => {
  it('bins HBM bandwidth, engine utilization and DMA queue occupancy', () => {
    const tracks = counterTracks(rows, 0, 100, 2);
    expect(tracks.binNs).toBe(50);
    // q0: 1000 B over 100 ns (5 B/ns in each bin... 10 B/ns); q1: 500 B over the second 50 ns (10 B/ns).
    expect(tracks.hbmGbps).toEqual([10, 20]);
    expect(tracks.engineBusy.vector).toEqual([1, 1]);
    expect(tracks.engineBusy.tensor).toEqual([0, 0]);
    expect(tracks.dmaBusyQueues).toEqual([1, 2]);
    expect(tracks.dmaQueues).toBe(2);
  });
});
