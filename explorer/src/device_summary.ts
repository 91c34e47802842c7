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
