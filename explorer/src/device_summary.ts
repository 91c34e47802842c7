// Box-selection summary of the device timeline: per row, the active time inside [start, end], bytes
// moved and instruction counts. Times are ns from the execution's start.

import type { DeviceRow } from './api';

export interface RowSummary {
  name: string;
  activeNs: number;
  activePercent: number;
  instructions: number;
  hbmBytes: number;
  onchipBytes: number;
  flops: number;
}

export function summarizeRange(rows: readonly DeviceRow[], start: number, end: number): RowSummary[] {
  const width = Math.max(end - start, Number.EPSILON);
  return rows.map((row) => {
    let activeNs = 0;
    let instructions = 0;
    let hbmBytes = 0;
    let onchipBytes = 0;
    let flops = 0;
    // Union of busy intervals clipped to the range (records of one row may overlap on DMA queues).
    let coveredUntil = start;
    const sorted = [...row.records].sort((a, b) => a.start - b.start);
    for (const record of sorted) {
      const recordEnd = record.start + record.dur;
      if (recordEnd < start || record.start > end) continue;
      instructions += 1;
      hbmBytes += record.hbm_read + record.hbm_written;
      onchipBytes += record.onchip;
      flops += record.flops;
      const from = Math.max(record.start, coveredUntil);
      const to = Math.min(recordEnd, end);
      if (to > from) {
        activeNs += to - from;
        coveredUntil = to;
      }
    }
    return { name: row.name, activeNs, activePercent: (100 * activeNs) / width, instructions, hbmBytes, onchipBytes, flops };
  });
}

export function formatBytes(bytes: number): string {
  if (bytes >= 1 << 30) return `${(bytes / (1 << 30)).toFixed(2)} GiB`;
  if (bytes >= 1 << 20) return `${(bytes / (1 << 20)).toFixed(2)} MiB`;
  if (bytes >= 1 << 10) return `${(bytes / (1 << 10)).toFixed(1)} KiB`;
  return `${bytes} B`;
}

export type ColourMode = 'op' | 'engine' | 'opcode';

// The key an instruction is coloured by (colorFor of it) in each colour mode of the device timeline.
export function colourKey(mode: ColourMode, record: { op: number; opcode: string }, row: { engine: string },
  sourceOps: readonly string[]): string {
  if (mode === 'engine') return row.engine;
  if (mode === 'opcode') return record.opcode;
  return record.op >= 0 ? sourceOps[record.op] ?? '' : record.opcode;
}

// The legend of a colour mode: its keys in first-seen order (source ops: the answer's order).
export function legendKeys(mode: ColourMode, rows: readonly DeviceRow[], sourceOps: readonly string[]): string[] {
  if (mode === 'op') {
    const keys = [...sourceOps];
    if (rows.some((r) => r.records.some((x) => x.op < 0))) {
      for (const r of rows) for (const x of r.records) if (x.op < 0 && !keys.includes(x.opcode)) keys.push(x.opcode);
    }
    return keys;
  }
  const seen = new Set<string>();
  for (const row of rows) {
    if (mode === 'engine') {
      if (row.records.length > 0) seen.add(row.engine);
    } else {
      for (const x of row.records) seen.add(x.opcode);
    }
  }
  return [...seen];
}

export interface CounterTracks {
  binNs: number;
  hbmGbps: number[]; // HBM bytes moved per ns in the bin (= GB/s), each record's bytes spread over its time
  engineBusy: Record<string, number[]>; // per compute engine: the busy fraction of the bin, 0..1
  dmaBusyQueues: number[]; // DMA queues busy, averaged over the bin
  dmaQueues: number;
}

// Counter tracks over [start, end) ns in `bins` bins: HBM bandwidth, compute engine utilization and DMA
// queue occupancy, from the instruction records (per core: an answer is one execution on one core).
export function counterTracks(rows: readonly DeviceRow[], start: number, end: number, bins: number): CounterTracks {
  const count = Math.max(1, Math.floor(bins));
  const binNs = Math.max(end - start, Number.EPSILON) / count;
  const hbm = new Array<number>(count).fill(0);
  const dma = new Array<number>(count).fill(0);
  const engineBusy: Record<string, number[]> = {};
  let dmaQueues = 0;
  // Adds `amount(overlap)` to each bin the interval [from, to) overlaps.
  const spread = (series: number[], from: number, to: number, perNs: number) => {
    const lo = Math.max(from, start);
    const hi = Math.min(to, end);
    if (hi <= lo) return;
    const first = Math.floor((lo - start) / binNs);
    const last = Math.min(count - 1, Math.floor((hi - start) / binNs));
    for (let b = Math.max(0, first); b <= last; b++) {
      const binStart = start + b * binNs;
      const overlap = Math.min(hi, binStart + binNs) - Math.max(lo, binStart);
      if (overlap > 0) series[b] += overlap * perNs;
    }
  };
  for (const row of rows) {
    const isDma = row.engine === 'dma' || row.name.startsWith('DMA');
    if (isDma) dmaQueues++;
    const busy = isDma ? dma : (engineBusy[row.engine] ??= new Array<number>(count).fill(0));
    for (const r of row.records) {
      const bytes = r.hbm_read + r.hbm_written;
      if (bytes > 0) spread(hbm, r.start, r.start + Math.max(r.dur, Number.EPSILON), bytes / Math.max(r.dur, Number.EPSILON));
      spread(busy, r.start, r.start + r.dur, 1);
    }
  }
  const perBin = (series: number[]) => series.map((v) => v / binNs);
  const engines: Record<string, number[]> = {};
  for (const [engine, series] of Object.entries(engineBusy)) engines[engine] = perBin(series).map((v) => Math.min(1, v));
  return { binNs, hbmGbps: perBin(hbm), engineBusy: engines, dmaBusyQueues: perBin(dma).map((v) => Math.min(dmaQueues, v)), dmaQueues };
}
