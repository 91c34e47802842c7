import { describe, expect, it } from 'vitest';
import { firstOverlapping, hitTest, mergeSubPixel } from '../src/merge';

describe('sub-pixel merging', () => {
  it('merges runs of narrow items and keeps wide ones', () => {
    const items = [
      { start: 0, dur: 0.1 }, { start: 0.3, dur: 0.1 }, { start: 0.6, dur: 0.1 }, // one run
      { start: 5, dur: 3 }, // wide
      { start: 20, dur: 0.1 }, // alone
    ];
    const boxes = mergeSubPixel(items, 1);
    expect(boxes.map((b) => [b.start, b.count])).toEqual([[0, 3], [5, 1], [20, 1]]);
    expect(boxes[0].end).toBeCloseTo(0.7);
  });

  it('keeps every item when zoomed in', () => {
    const items = Array.from({ length: 10 }, (_, i) => ({ start: i, dur: 0.5 }));
    expect(mergeSubPixel(items, 0.01)).toHaveLength(10);
    expect(mergeSubPixel(items, 1)).toHaveLength(1);
    expect(mergeSubPixel(items, 1)[0].count).toBe(10);
  });

  it('finds the first item that can overlap a start time', () => {
    const items = [{ start: 0, dur: 1 }, { start: 10, dur: 1 }, { start: 20, dur: 5 }];
    expect(firstOverlapping(items, 22, 5)).toBe(2);
    expect(firstOverlapping(items, 11, 5)).toBe(1);
  });

  it('hit-tests the narrowest box under the cursor', () => {
    const boxes = [{ start: 0, end: 100, id: 'outer' }, { start: 40, end: 50, id: 'inner' }];
    expect(hitTest(boxes, 45, 0)?.id).toBe('inner');
    expect(hitTest(boxes, 10, 0)?.id).toBe('outer');
    expect(hitTest(boxes, 200, 2)).toBeUndefined();
  });
});
