import { describe, expect, it } from 'vitest';
import type { RooflineData, RooflinePoint } from '../src/api';
import {
  DEFAULT_LAYOUT, attainable, axisAt, axisValue, ceilingPoints, decades, logAxis, placePoints, pointRadius, rooflineAxes,
  rooflineSvg,
} from '../src/roofline';

// trn2-like peaks: 78.6 TFLOP/s, 362 GB/s -> ridge ~217 FLOP/B.
const roof = (points: RooflinePoint[]): RooflineData => ({
  peak_flops_per_s: 78.6432e12, hbm_bytes_per_s: 362e9, ridge_point: 78.6432e12 / 362e9, points,
});

const point = (name: string, intensity: number, achieved: number, time_us: number, kind: RooflinePoint['kind'] = 'op'):
    RooflinePoint => {
  const r = roof([]);
  const roofAt = Math.min(r.peak_flops_per_s, intensity * r.hbm_bytes_per_s);
  return {
    kind, name, intensity, achieved_flops_per_s: achieved, attainable_flops_per_s: roofAt, efficiency: achieved / roofAt,
    bound: intensity < r.ridge_point ? 'memory-bound' : 'compute-bound', time_us,
  };
};

describe('log axis', () => {
  it('aligns to decades and maps both ways', () => {
    const axis = logAxis(0.05, 2000, 0, 500);
    expect(axis.lowDecade).toBe(-2);
    expect(axis.highDecade).toBe(4);
    expect(decades(axis)).toHaveLength(7);
    expect(axisAt(axis, 0.01)).toBeCloseTo(0);
    expect(axisAt(axis, 1e4)).toBeCloseTo(500);
    expect(axisAt(axis, 1)).toBeCloseTo(500 * (2 / 6));
    expect(axisValue(axis, axisAt(axis, 37))).toBeCloseTo(37);
    // Zero and negative values sit on the low edge instead of producing NaN.
    expect(axisAt(axis, 0)).toBe(0);
  });

  it('refuses non-positive bounds and widens a single decade', () => {
    expect(() => logAxis(0, 10, 0, 1)).toThrow(/positive bounds/);
    const axis = logAxis(10, 10, 0, 1);
    expect(axis.highDecade - axis.lowDecade).toBe(1);
  });
});

describe('roofline geometry', () => {
  it('attainable is the bandwidth slope left of the ridge and the roof right of it', () => {
    const r = roof([]);
    expect(attainable(r, 1)).toBeCloseTo(362e9);
    expect(attainable(r, r.ridge_point)).toBeCloseTo(r.peak_flops_per_s);
    expect(attainable(r, r.ridge_point * 10)).toBe(r.peak_flops_per_s);
  });

  it('covers the ridge and every point', () => {
    const points = [point('aten::mul', 0.1, 1.3e10, 59), point('matmul', 5000, 5e13, 3)];
    const axes = rooflineAxes(roof(points), points);
    expect(Math.pow(10, axes.x.lowDecade)).toBeLessThanOrEqual(0.05);
    expect(Math.pow(10, axes.x.highDecade)).toBeGreaterThanOrEqual(10000);
    expect(Math.pow(10, axes.y.highDecade)).toBeGreaterThanOrEqual(78.6432e12);
    // y grows upwards on screen.
    expect(axes.y.from).toBeGreaterThan(axes.y.to);
  });

  it('the ceiling bends at the ridge point, at the height of the roof', () => {
    const r = roof([]);
    const axes = rooflineAxes(r, []);
    const [start, ridge, end] = ceilingPoints(r, axes);
    expect(ridge[0]).toBeCloseTo(axisAt(axes.x, r.ridge_point));
    expect(ridge[1]).toBeCloseTo(axisAt(axes.y, r.peak_flops_per_s));
    expect(end[1]).toBeCloseTo(ridge[1]);
    expect(end[0]).toBeCloseTo(axes.x.to);
    // The slope: one decade of intensity is one decade of FLOP/s, so start lies on intensity x bandwidth.
    const startIntensity = axisValue(axes.x, start[0]);
    expect(axisValue(axes.y, start[1])).toBeCloseTo(startIntensity * r.hbm_bytes_per_s, -6);
  });

  it('sizes circles by their share of the time (area), with a minimum', () => {
    expect(pointRadius(100, 100)).toBeCloseTo(22);
    expect(pointRadius(25, 100)).toBeCloseTo(11);
    expect(pointRadius(0, 100)).toBe(4);
    expect(pointRadius(5, 0)).toBe(4);
    const points = [point('a', 0.1, 1e10, 75), point('b', 0.2, 2e10, 25)];
    const placed = placePoints(points, rooflineAxes(roof(points), points));
    expect(placed[0].r / placed[1].r).toBeCloseTo(Math.sqrt(3));
    expect(placed[1].cx).toBeGreaterThan(placed[0].cx);
    expect(placed[1].cy).toBeLessThan(placed[0].cy);
  });

  it('draws one circle per point with its values in the title, escaped', () => {
    const points = [point('aten::mul', 0.1, 1.3e10, 59), point('mul_f32[512]<x>', 0.12, 1.1e10, 23, 'executable')];
    const svg = rooflineSvg(roof(points), points);
    expect(svg.match(/class="roofline-point"/g)).toHaveLength(2);
    expect(svg).toContain('data-testid="roofline-ceiling"');
    expect(svg).toContain('mul_f32[512]&lt;x&gt; (executable)');
    expect(svg).toContain('memory-bound');
    expect(svg).toContain(`width="${DEFAULT_LAYOUT.width}"`);
    expect(() => rooflineSvg({ ...roof(points), hbm_bytes_per_s: 0 }, points)).toThrow(/HBM bandwidth/);
  });
});

describe('one roof per engine and width', () => {
  const roofs = [
    { name: 'Tensor bf16/fp16', flops_per_s: 78.6432e12 },
    { name: 'Tensor fp32', flops_per_s: 19.6608e12 },
    { name: 'Vector fp32', flops_per_s: 245.76e9 },
    { name: 'Scalar fp32', flops_per_s: 153.6e9 },
  ];
  const linear = { ...point('aten::linear', 92, 16.7e12, 10), roof: 'Tensor fp32', compute_roof_flops_per_s: 19.6608e12 };
  const rmsNorm = { ...point('aten::rms_norm', 0.49, 145e9, 20), roof: 'Scalar fp32', compute_roof_flops_per_s: 307e9 };
  const copy = { ...point('aten::contiguous', 0, 0, 1), roof: '' };
  const data = { ...roof([linear, rmsNorm, copy]), roofs };

  it('draws the lower roofs that bind some point, not the others', async () => {
    const { lowerRoofs } = await import('../src/roofline');
    expect(lowerRoofs(data, data.points).map((r) => r.name)).toEqual(['Tensor fp32', 'Scalar fp32']);
    const svg = rooflineSvg(data, data.points);
    expect(svg.match(/data-testid="roofline-roof"/g)).toHaveLength(2);
    expect(svg).toContain('Scalar fp32 154 GFLOP/s');
    expect(svg).not.toContain('Vector fp32');
    expect(svg).toContain('Tensor bf16/fp16 78.6 TFLOP/s');
  });

  it('keeps roof labels apart and names the binding engine in the tooltip', async () => {
    const { spacedLabels, pointTitle } = await import('../src/roofline');
    // Above its line when there is room, else below it, never on it.
    expect(spacedLabels([100, 110, 140])).toEqual([96, 122, 136]);
    expect(pointTitle(rmsNorm)).toContain('compute ceiling 307 GFLOP/s (Scalar fp32 binds)');
    expect(pointTitle(copy)).not.toContain('compute ceiling');
  });
});
