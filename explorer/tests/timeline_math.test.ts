import { describe, expect, it } from 'vitest';
import {
  activityView, clampView, summarizeArea, fit, focusOn, formatTime, keyAction, pan, paddedWindow, revealEvent, ruler, ticks, timeToX,
  windowCovers, xToTime, zoom,
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

describe('ruler', () => {
  it('labels ticks 400 ns apart at 12.326 ms as base + offsets, every label different', () => {
    const r = ruler({ start: 12326.1, end: 12326.5 }, 8);
    expect(r.base).toBeDefined();
    expect(r.base?.label).toBe('12.3260 ms');
    const labels = r.ticks.map((t) => t.label);
    expect(new Set(labels).size).toBe(labels.length);
    expect(labels[0]).toBe('+100 ns');
    expect(labels).toContain('+200 ns');
  });

  it('labels a wide view absolutely with the precision of its step', () => {
    const r = ruler({ start: 0, end: 500 }, 10);
    expect(r.base).toBeUndefined();
    expect(r.ticks.map((t) => t.label)).toEqual(['0 ns', '50 us', '100 us', '150 us', '200 us', '250 us', '300 us',
      '350 us', '400 us', '450 us', '500 us']);
  });

  it('labels relative to an origin and never writes -0', () => {
    const r = ruler({ start: 999.985, end: 1000.03 }, 5, 1000);
    expect(r.ticks[0].label).toBe('-10 ns');
    expect(r.ticks.map((t) => t.label)).toContain('0 ns');
    expect(formatTime(-0.00001, 0.01)).toBe('0 ns');
    expect(formatTime(20, 0.001)).toBe('20.000 us');
    expect(formatTime(1238945344.3, 1e5)).toBe('1238.9 s');
  });
});

describe('first view and search reveal', () => {
  const step = { start: 0, end: 600_000 }; // a step of 600 ms, mostly waiting
  it('opens on the executions and their launching ops, not the whole step', () => {
    const view = activityView([{ start: 100, end: 130 }, { start: 900, end: 905 }], step);
    expect(view.start).toBeCloseTo(100 - 40.25);
    expect(view.end).toBeCloseTo(905 + 40.25);
    expect(activityView([], step)).toEqual(fit(step));
  });

  it('zooms to a match too narrow to see, keeps a visible one where it is', () => {
    const wide = { start: 0, end: 1_486_000_000 };
    const bounds = { start: 0, end: 1_486_000_000 };
    const shown = revealEvent(wide, 1000, 5000, 64, bounds);
    expect(shown.end - shown.start).toBeCloseTo(192);
    expect(shown.start).toBeLessThan(5000);
    expect(shown.end).toBeGreaterThan(5064);
    const near = { start: 4900, end: 5300 };
    expect(revealEvent(near, 1000, 5000, 64, bounds)).toBe(near);
  });
});

describe('area selection', () => {
  it('sums what a range covers by name, clipped to it, most time first', () => {
    const rows = summarizeArea({ start: 10, end: 20 }, [
      { name: 'a', ts: 0, dur: 15 }, { name: 'b', ts: 12, dur: 2 }, { name: 'a', ts: 18, dur: 10 },
      { name: 'm', ts: 11, dur: 1, count: 40 }, { name: 'c', ts: 25, dur: 1 },
    ]);
    expect(rows).toEqual([
      { name: 'a', count: 2, durationUs: 7 }, { name: 'b', count: 1, durationUs: 2 }, { name: 'm', count: 40, durationUs: 1 },
    ]);
  });
});
