// The Summary page's data: which of the flat summary metrics to show, with what unit, the per-engine
// active percentages and the arithmetic-intensity verdict against the ridge point. Metric names and
// definitions are the analysis layer's (docs/analysis.md; docs/hardware-model.md §3.5).

import type { Insight, SummaryAnswer } from './api';
import { formatBytes } from './device_summary';
import { formatDuration } from './timeline_math';

export type MetricUnit = 'us' | 'percent' | 'bytes' | 'count' | 'flop_per_byte' | 'flops' | 'gbps' | 'text';

export interface MetricSpec {
  key: string;
  label: string;
  unit: MetricUnit;
}

export interface MetricGroup {
  title: string;
  metrics: MetricSpec[];
}

export const METRIC_GROUPS: MetricGroup[] = [
  {
    title: 'Time',
    metrics: [
      { key: 'total_time_us', label: 'Device time (sum of executions)', unit: 'us' },
      { key: 'executions', label: 'Executions', unit: 'count' },
      { key: 'executables', label: 'Executables', unit: 'count' },
      { key: 'neuroncore_cycle_count', label: 'NeuronCore cycles', unit: 'count' },
    ],
  },
  {
    title: 'Utilization',
    metrics: [
      { key: 'mfu_estimated_percent', label: 'MFU (model FLOPs / peak)', unit: 'percent' },
      { key: 'hfu_estimated_percent', label: 'HFU (hardware FLOPs / peak)', unit: 'percent' },
      { key: 'mbu_estimated_percent', label: 'MBU (HBM bytes / peak bandwidth)', unit: 'percent' },
      { key: 'model_flops', label: 'Model FLOPs', unit: 'flops' },
      { key: 'tensor_engine_peak_tflops', label: 'Tensor engine peak', unit: 'text' },
    ],
  },
  {
    title: 'Memory traffic',
    metrics: [
      { key: 'hbm_read_bytes', label: 'HBM read', unit: 'bytes' },
      { key: 'hbm_write_bytes', label: 'HBM written', unit: 'bytes' },
      { key: 'hbm_bandwidth_gbps', label: 'HBM peak bandwidth', unit: 'gbps' },
      { key: 'dma_transfer_count', label: 'DMA transfers', unit: 'count' },
      { key: 'dma_transfer_average_bytes', label: 'Average DMA transfer', unit: 'bytes' },
    ],
  },
  {
    title: 'Arithmetic intensity',
    metrics: [
      { key: 'model_arithmetic_intensity', label: 'Model (FLOPs / HBM byte)', unit: 'flop_per_byte' },
      { key: 'mm_arithmetic_intensity', label: 'Matmul only', unit: 'flop_per_byte' },
      { key: 'peak_flops_bandwidth_ratio', label: 'Ridge point (peak FLOP/s / HBM B/s)', unit: 'flop_per_byte' },
      { key: 'bound', label: 'Bound', unit: 'text' },
    ],
  },
];

export function numberMetric(summary: SummaryAnswer, key: string): number | undefined {
  const value = summary[key];
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

// Scales by 1000 with SI prefixes: 1.05e6 -> "1.05 M".
export function formatSi(value: number, unit: string): string {
  const prefixes = ['', 'K', 'M', 'G', 'T', 'P', 'E'];
  let scaled = value;
  let index = 0;
  while (Math.abs(scaled) >= 1000 && index < prefixes.length - 1) {
    scaled /= 1000;
    index += 1;
  }
  return `${Number(scaled.toPrecision(3))} ${prefixes[index]}${unit}`;
}

export function formatMetric(value: unknown, unit: MetricUnit, key = ''): string {
  if (value === undefined || value === null) return '—';
  if (typeof value !== 'number') return String(value);
  if (!Number.isFinite(value)) return '—';
  switch (unit) {
    case 'us':
      return formatDuration(value);
    case 'percent':
      return `${value < 0.1 && value > 0 ? value.toPrecision(2) : value.toFixed(1)} %`;
    case 'bytes':
      return formatBytes(Math.round(value));
    case 'count':
      return Math.round(value).toLocaleString('en-US');
    case 'flop_per_byte':
      return `${value >= 100 ? value.toFixed(0) : Number(value.toPrecision(3))} FLOP/B`;
    case 'flops':
      return `${formatSi(value, 'FLOP')}`;
    case 'gbps':
      return `${value.toFixed(0)} GB/s`;
    case 'text':
      return key.endsWith('_tflops') ? `${value.toFixed(1)} TFLOP/s` : String(value);
  }
}

export interface EngineBar {
  engine: string;
  label: string;
  percent: number; // of the device time, clamped to [0, 100]
  activeUs?: number;
}

const ENGINES: [string, string][] = [
  ['tensor', 'Tensor'], ['vector', 'Vector'], ['scalar', 'Scalar'], ['gpsimd', 'GpSimd'], ['dma', 'DMA'],
];

// Engines missing from the answer are left out rather than shown as idle.
export function engineBars(summary: SummaryAnswer): EngineBar[] {
  const bars: EngineBar[] = [];
  for (const [engine, label] of ENGINES) {
    const percent = numberMetric(summary, `${engine}_engine_active_time_percent`);
    if (percent === undefined) continue;
    bars.push({
      engine, label, percent: Math.min(100, Math.max(0, percent)),
      activeUs: numberMetric(summary, `${engine}_engine_active_time_us`),
    });
  }
  return bars;
}

export interface IntensityVerdict {
  bound: 'memory-bound' | 'compute-bound' | 'unknown';
  intensity?: number;
  ridge?: number;
  text: string;
}

// Where the profile's arithmetic intensity sits against the ridge point: left of it the HBM bandwidth
// limits, right of it the compute roof (reference/viewers.md §5).
export function intensityVerdict(summary: SummaryAnswer): IntensityVerdict {
  const intensity = numberMetric(summary, 'model_arithmetic_intensity');
  const ridge = numberMetric(summary, 'peak_flops_bandwidth_ratio');
  if (intensity === undefined || ridge === undefined || ridge <= 0) {
    return { bound: 'unknown', intensity, ridge, text: 'No arithmetic intensity: the profile has no FLOP or byte counts.' };
  }
  const memory = intensity < ridge;
  const ratio = memory ? ridge / Math.max(intensity, Number.MIN_VALUE) : intensity / ridge;
  const intensityText = formatMetric(intensity, 'flop_per_byte');
  const ridgeText = formatMetric(ridge, 'flop_per_byte');
  const text = memory
    ? `Memory-bound: ${intensityText} is ${formatRatio(ratio)} below the ridge point (${ridgeText}); HBM bandwidth ` +
      'limits the attainable FLOP/s, so cut bytes moved (fuse, keep intermediates on chip) before FLOPs.'
    : `Compute-bound: ${intensityText} is ${formatRatio(ratio)} above the ridge point (${ridgeText}); the compute ` +
      'roof limits, so raise engine utilization (MFU).';
  return { bound: memory ? 'memory-bound' : 'compute-bound', intensity, ridge, text };
}

function formatRatio(ratio: number): string {
  return ratio >= 100 ? `${Math.round(ratio).toLocaleString('en-US')}x` : `${Number(ratio.toPrecision(3))}x`;
}

// Insights as ranked: largest potential saving first (the server's order for equal savings is kept).
export function rankInsights(insights: readonly Insight[]): Insight[] {
  return insights
    .map((insight, index) => ({ insight, index }))
    .sort((a, b) => (b.insight.potential_saving_us - a.insight.potential_saving_us) || a.index - b.index)
    .map((x) => x.insight);
}

// Raw figures in the server's insight text in human units: "1238945344.3 us" reads "1238.945 s" and
// "1182724 bytes" "1.13 MiB"; a count without a unit stays as written.
export function humanizeText(text: string): string {
  return text
    .replace(/\b(\d+(?:\.\d+)?) us\b/g, (whole, value: string) => (Number(value) >= 1000 ? formatDuration(Number(value)) : whole))
    .replace(/\b(\d+) bytes\b/g, (whole, value: string) => (Number(value) >= 1024 ? formatBytes(Number(value)) : whole));
}
