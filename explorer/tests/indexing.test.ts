import { describe, expect, it } from 'vitest';
import { indexingText, shiftView } from '../src/indexing';

describe('the first view of a large profile', () => {
  it('says how far the whole trace is indexed and what is shown meanwhile', () => {
    const text = indexingText({ first_view_bytes: 16 << 20, indexed_bytes: 2 ** 30, trace_bytes: 4 * 2 ** 30, fraction: 0.25 });
    expect(text).toBe('Indexing trace.json: 25% of 4.00 GiB read; showing its first 16.00 MiB until the whole trace is indexed');
    // Never past 100% or below 0, whatever the server sends.
    expect(indexingText({ first_view_bytes: 1024, indexed_bytes: 5000, trace_bytes: 4096, fraction: 1.2 })).toContain(': 100% of');
    expect(indexingText({ first_view_bytes: 1024, indexed_bytes: 0, trace_bytes: 4096, fraction: -1 })).toContain(': 0% of');
    expect(indexingText(undefined)).toContain('first part');
  });

  it('keeps the same instants on screen when the complete index finds an earlier origin', () => {
    // Times are relative to the earliest event: 100 us earlier origin, every relative time 100 us later.
    expect(shiftView({ start: 10, end: 20 }, 1_000_100, 1_000_000)).toEqual({ start: 110, end: 120 });
    expect(shiftView({ start: 10, end: 20 }, 5, 5)).toEqual({ start: 10, end: 20 });
    expect(shiftView({ start: 10, end: 20 }, undefined, 5)).toEqual({ start: 10, end: 20 });
  });
});
