import { describe, expect, it } from 'vitest';
import {
  clampView, fit, focusOn, keyAction, pan, paddedWindow, ticks, timeToX, windowCovers, xToTime, zoom,
} from '../src/timeline_math';

const bounds = { start: 0, end: 1000 };

describe('viewport math', () => {
  it('maps time to pixels and back', () => {
    const view = { start: 100, end: 300 };
    expect(timeToX(view, 1000, 200)).toBe(500);
    expect(xToTime(view, 1000, 250)).toBe(150);
  });

  it('zooms around the anchor', () => {
    const view = zoom({ start: 0, end: 1000 }, 0.5, 250, bounds);
    expect(view.end - view.start).toBe(500);
    expect(timeToX(view, 1000, 250)).toBeCloseTo(250);
  });

  it('pans by a fraction of the span and stays near the data', () => {
    expect(pan({ start: 100, end: 200 }, 0.5, bounds)).toEqual({ start: 150, end: 250 });
    const far = pan({ start: 900, end: 1000 }, 10, bounds);
    expect(far.end).toBeCloseTo(1100);
    expect(far.end - far.start).toBeCloseTo(100);
  });

  it('never zooms below the minimum span nor wider than the data plus margins', () => {
    expect(zoom({ start: 10, end: 10.001 }, 0.001, 10, bounds).end - 10).toBeGreaterThan(0);
    const wide = clampView({ start: -1e9, end: 1e9 }, bounds);
    expect(wide).toEqual({ start: -100, end: 1100 });
  });

  it('fits and focuses', () => {
    expect(fit(bounds, 0.1)).toEqual({ start: -100, end: 1100 });
    const focused = focusOn(500, 10, bounds);
    expect(focused.start).toBeLessThan(500);
    expect(focused.end).toBeGreaterThan(510);
  });

  it('maps W/A/S/D and arrows', () => {
    expect(keyAction('w')).toEqual({ kind: 'zoom', factor: 0.8 });
    expect(keyAction('S').kind).toBe('zoom');
    expect(keyAction('ArrowLeft')).toEqual({ kind: 'pan', fraction: -0.2 });
    expect(keyAction('d', true)).toEqual({ kind: 'pan', fraction: 0.5 });
    expect(keyAction('x')).toEqual({ kind: 'none' });
  });

  it('reuses a padded window while the view stays inside it at a similar density', () => {
    const view = { start: 100, end: 200 };
    const window = paddedWindow(view, 1000);
    expect(window).toEqual({ start: 50, end: 250, widthPx: 2000 });
    expect(windowCovers(window, { start: 120, end: 220 }, 1000)).toBe(true);
    expect(windowCovers(window, { start: 200, end: 300 }, 1000)).toBe(false);
    expect(windowCovers(window, { start: 140, end: 160 }, 1000)).toBe(false); // zoomed in 5x
  });

  it('places ticks on a 1-2-5 grid', () => {
    expect(ticks({ start: 0, end: 100 }, 5)).toEqual([0, 20, 40, 60, 80, 100]);
  });
});
