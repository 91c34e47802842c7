// The roofline chart (reference/viewers.md §5): log-log axes, the HBM bandwidth slope up to the ridge
// point and the compute roof after it, one circle per executable or op (area by device time). The same
// data and axis rules as `sightline roofline` (src/analysis/roofline_svg.cpp). Pure: the chart is an
// SVG string, so the layout is unit-tested; hover is wired by roofline_view.ts.

import type { Roof, RooflineData, RooflinePoint } from './api';
import { escapeHtml } from './html';
import { formatSi } from './summary_data';

// A decade-aligned log10 axis mapping values to pixels.
export interface LogAxis {
  lowDecade: number;
  highDecade: number;
  from: number; // pixel of 10^lowDecade
  to: number; // pixel of 10^highDecade
}

export function logAxis(low: number, high: number, from: number, to: number): LogAxis {
  if (!(low > 0) || !(high > 0)) throw new Error(`a log axis needs positive bounds, got [${low}, ${high}]`);
  const lowDecade = Math.floor(Math.log10(low));
  let highDecade = Math.ceil(Math.log10(high));
  if (highDecade <= lowDecade) highDecade = lowDecade + 1;
  return { lowDecade, highDecade, from, to };
}

// Values at or below the axis' lowest decade sit on its edge.
export function axisAt(axis: LogAxis, value: number): number {
  const v = Math.log10(Math.max(value, Math.pow(10, axis.lowDecade)));
  return axis.from + ((v - axis.lowDecade) / (axis.highDecade - axis.lowDecade)) * (axis.to - axis.from);
}

export function axisValue(axis: LogAxis, pixel: number): number {
  const fraction = (pixel - axis.from) / (axis.to - axis.from);
  return Math.pow(10, axis.lowDecade + fraction * (axis.highDecade - axis.lowDecade));
}

export function decades(axis: LogAxis): number[] {
  const out: number[] = [];
  for (let d = axis.lowDecade; d <= axis.highDecade; d++) out.push(Math.pow(10, d));
  return out;
}

export function attainable(roof: RooflineData, intensity: number): number {
  return Math.min(roof.peak_flops_per_s, intensity * roof.hbm_bytes_per_s);
}

export interface ChartLayout {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

export const DEFAULT_LAYOUT: ChartLayout = { width: 1000, height: 540, left: 110, right: 30, top: 30, bottom: 60 };
const MAX_RADIUS = 22;
const MIN_RADIUS = 4;

export interface RooflineAxes {
  x: LogAxis; // arithmetic intensity, FLOP/byte
  y: LogAxis; // FLOP/s
}

// Ranges: two decades left and one right of the ridge, four decades under the roof, widened to every
// point (with half a decade of room) so nothing falls off the chart.
export function rooflineAxes(roof: RooflineData, points: readonly RooflinePoint[], layout = DEFAULT_LAYOUT): RooflineAxes {
  if (!(roof.peak_flops_per_s > 0) || !(roof.hbm_bytes_per_s > 0)) {
    throw new Error('the roofline needs a positive peak FLOP/s and HBM bandwidth (the device spec has none)');
  }
  const ridge = roof.ridge_point > 0 ? roof.ridge_point : roof.peak_flops_per_s / roof.hbm_bytes_per_s;
  let xLow = ridge / 100;
  let xHigh = ridge * 10;
  let yLow = roof.peak_flops_per_s / 1e4;
  const yHigh = roof.peak_flops_per_s * 2;
  for (const p of points) {
    if (p.intensity > 0) {
      xLow = Math.min(xLow, p.intensity / 2);
      xHigh = Math.max(xHigh, p.intensity * 2);
    }
    if (p.achieved_flops_per_s > 0) yLow = Math.min(yLow, p.achieved_flops_per_s / 2);
  }
  return {
    x: logAxis(xLow, xHigh, layout.left, layout.width - layout.right),
    y: logAxis(yLow, yHigh, layout.height - layout.bottom, layout.top),
  };
}

// The ceiling as three points: where the bandwidth slope enters the chart, the ridge, the roof's end.
export function ceilingPoints(roof: RooflineData, axes: RooflineAxes): [number, number][] {
  const xStart = Math.pow(10, axes.x.lowDecade);
  const xEnd = Math.pow(10, axes.x.highDecade);
  const slopeY = Math.max(xStart * roof.hbm_bytes_per_s, Math.pow(10, axes.y.lowDecade));
  const slopeX = slopeY / roof.hbm_bytes_per_s;
  const ridge = roof.peak_flops_per_s / roof.hbm_bytes_per_s;
  return [
    [axisAt(axes.x, slopeX), axisAt(axes.y, slopeY)],
    [axisAt(axes.x, ridge), axisAt(axes.y, roof.peak_flops_per_s)],
    [axisAt(axes.x, xEnd), axisAt(axes.y, roof.peak_flops_per_s)],
  ];
}

// The roofs below the peak that bind some point (f32 Vector or Scalar work cannot reach the Tensor
// engine's bf16 peak), highest first: the chart draws only those, so labels stay few.
export function lowerRoofs(roof: RooflineData, points: readonly RooflinePoint[]): Roof[] {
  const bound = new Set(points.map((p) => p.roof).filter((name): name is string => !!name));
  return (roof.roofs ?? []).filter((r) => r.flops_per_s < roof.peak_flops_per_s && bound.has(r.name));
}

// Baselines of the labels of roofs drawn at pixel rows `lines` (top to bottom): just above each line,
// or, when that would touch the label before, just below it (never on the dashed line itself), and
// always at least `gap` px below the label before.
export function spacedLabels(lines: readonly number[], gap = 13): number[] {
  const out: number[] = [];
  for (const line of lines) {
    const above = line - 4;
    const previous = out.length > 0 ? out[out.length - 1] : -Infinity;
    out.push(above >= previous + gap ? above : Math.max(line + 12, previous + gap));
  }
  return out;
}

// Circle area proportional to the point's share of the time of its kind.
export function pointRadius(timeUs: number, totalUs: number): number {
  const share = totalUs > 0 ? Math.max(0, timeUs) / totalUs : 0;
  return Math.max(MIN_RADIUS, MAX_RADIUS * Math.sqrt(share));
}

export interface PlacedPoint {
  point: RooflinePoint;
  index: number; // in the points given
  cx: number;
  cy: number;
  r: number;
}

export function placePoints(points: readonly RooflinePoint[], axes: RooflineAxes): PlacedPoint[] {
  const total = points.reduce((sum, p) => sum + p.time_us, 0);
  return points.map((point, index) => ({
    point, index,
    cx: axisAt(axes.x, point.intensity > 0 ? point.intensity : Math.pow(10, axes.x.lowDecade)),
    cy: axisAt(axes.y, point.achieved_flops_per_s > 0 ? point.achieved_flops_per_s : Math.pow(10, axes.y.lowDecade)),
    r: pointRadius(point.time_us, total),
  }));
}

export const KIND_COLORS: Record<RooflinePoint['kind'], string> = { executable: '#7c3aed', op: '#0d9488' };

// The whole chart. Larger circles are drawn first so small ones stay on top and hoverable.
export function rooflineSvg(roof: RooflineData, points: readonly RooflinePoint[], layout = DEFAULT_LAYOUT): string {
  const axes = rooflineAxes(roof, points, layout);
  const { x, y } = axes;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${layout.width} ${layout.height}" width="${layout.width}" ` +
      `height="${layout.height}" font-family="system-ui, sans-serif" font-size="11" data-testid="roofline-chart">`,
  ];
  for (const value of decades(x)) {
    const px = axisAt(x, value).toFixed(1);
    parts.push(`<line x1="${px}" y1="${y.from}" x2="${px}" y2="${y.to}" stroke="#e6e6e6"/>`,
      `<text x="${px}" y="${y.from + 16}" text-anchor="middle">${formatSi(value, '')}</text>`);
  }
  for (const value of decades(y)) {
    const py = axisAt(y, value).toFixed(1);
    parts.push(`<line x1="${x.from}" y1="${py}" x2="${x.to}" y2="${py}" stroke="#e6e6e6"/>`,
      `<text x="${x.from - 6}" y="${py}" dy="4" text-anchor="end">${formatSi(value, 'FLOP/s')}</text>`);
  }
  parts.push(`<rect x="${x.from}" y="${y.to}" width="${x.to - x.from}" height="${y.from - y.to}" fill="none" stroke="#333"/>`,
    `<text x="${(x.from + x.to) / 2}" y="${layout.height - 18}" text-anchor="middle">Arithmetic intensity ` +
      '(FLOP per HBM byte, log scale)</text>',
    `<text transform="translate(16 ${(y.from + y.to) / 2}) rotate(-90)" text-anchor="middle">Achieved FLOP/s (log scale)</text>`);

  const ceiling = ceilingPoints(roof, axes);
  const [, ridgePx] = ceiling;
  parts.push(`<polyline data-testid="roofline-ceiling" fill="none" stroke="#d62728" stroke-width="2.5" points="${
    ceiling.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ')}"/>`,
  `<line x1="${ridgePx[0].toFixed(1)}" y1="${ridgePx[1].toFixed(1)}" x2="${ridgePx[0].toFixed(1)}" y2="${y.from}" ` +
    'stroke="#d62728" stroke-dasharray="4 3"/>',
  `<circle cx="${ridgePx[0].toFixed(1)}" cy="${ridgePx[1].toFixed(1)}" r="4" fill="#d62728"/>`,
  `<text x="${(ridgePx[0] + 6).toFixed(1)}" y="${(ridgePx[1] - 8).toFixed(1)}" fill="#d62728">${
    escapeHtml(roof.roofs?.[0]?.name ?? 'compute roof')} ${formatSi(roof.peak_flops_per_s, 'FLOP/s')}</text>`,
  `<text x="${(ridgePx[0] + 4).toFixed(1)}" y="${y.from - 8}" fill="#d62728">ridge ${
    Number(roof.ridge_point.toPrecision(3))} FLOP/B</text>`,
  `<text x="${(ceiling[0][0] + 8).toFixed(1)}" y="${(ceiling[0][1] - 10).toFixed(1)}" fill="#d62728">HBM ${
    formatSi(roof.hbm_bytes_per_s, 'B/s')}</text>`);

  const lower = lowerRoofs(roof, points);
  const xEnd = Math.pow(10, x.highDecade);
  const labelRows = spacedLabels(lower.map((r) => axisAt(y, r.flops_per_s)));
  lower.forEach((r, i) => {
    const py = axisAt(y, r.flops_per_s).toFixed(1);
    const meets = axisAt(x, r.flops_per_s / roof.hbm_bytes_per_s).toFixed(1);
    parts.push(`<line data-testid="roofline-roof" x1="${meets}" y1="${py}" x2="${axisAt(x, xEnd).toFixed(1)}" y2="${py}" ` +
      'stroke="#7f7f7f" stroke-width="1.5" stroke-dasharray="6 3"/>',
    `<text x="${(axisAt(x, xEnd) - 4).toFixed(1)}" y="${labelRows[i].toFixed(1)}" fill="#7f7f7f" text-anchor="end">${
      escapeHtml(r.name)} ${formatSi(r.flops_per_s, 'FLOP/s')}</text>`);
  });

  const placed = placePoints(points, axes).sort((a, b) => b.r - a.r);
  for (const p of placed) {
    const color = KIND_COLORS[p.point.kind];
    parts.push(`<circle class="roofline-point" data-index="${p.index}" cx="${p.cx.toFixed(1)}" cy="${p.cy.toFixed(1)}" ` +
      `r="${p.r.toFixed(1)}" fill="${color}" fill-opacity="0.55" stroke="${color}"><title>${escapeHtml(pointTitle(p.point))}` +
      '</title></circle>');
  }
  parts.push('</svg>');
  return parts.join('\n');
}

export function pointTitle(p: RooflinePoint): string {
  return `${p.name} (${p.kind}): ${Number(p.intensity.toPrecision(3))} FLOP/B, ${formatSi(p.achieved_flops_per_s, 'FLOP/s')} ` +
    `of ${formatSi(p.attainable_flops_per_s, 'FLOP/s')} attainable (${(100 * p.efficiency).toFixed(1)}%), ${p.bound}` +
    (p.roof && p.compute_roof_flops_per_s ? `; compute ceiling ${formatSi(p.compute_roof_flops_per_s, 'FLOP/s')} (${p.roof} binds)` : '');
}
