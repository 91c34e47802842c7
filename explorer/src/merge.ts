// Level of detail on the client: boxes narrower than a pixel are merged per row into aggregate boxes
// carrying a count (the server does the same for the system timeline; the device timeline merges here).

export interface Span {
  start: number;
  dur: number;
}

export interface MergedBox<T> {
  start: number;
  end: number;
  count: number;
  first: T;
}

// items must be sorted by start. Boxes at least `pixel` wide stay single; runs of narrower ones whose
// gaps are under a pixel become one box.
export function mergeSubPixel<T extends Span>(items: readonly T[], pixel: number): MergedBox<T>[] {
  const out: MergedBox<T>[] = [];
  let open: MergedBox<T> | undefined;
  for (const item of items) {
    const end = item.start + item.dur;
    if (item.dur >= pixel) {
      if (open) out.push(open);
      open = undefined;
      out.push({ start: item.start, end, count: 1, first: item });
      continue;
    }
    if (open && item.start <= open.end + pixel) {
      open.end = Math.max(open.end, end);
      open.count += 1;
    } else {
      if (open) out.push(open);
      open = { start: item.start, end, count: 1, first: item };
    }
  }
  if (open) out.push(open);
  return out;
}

// Index of the first item that may overlap [start, ...] in a start-sorted array, given the longest
// duration in it.
export function firstOverlapping(items: readonly Span[], start: number, maxDur: number): number {
  let lo = 0;
  let hi = items.length;
  const from = start - maxDur;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (items[mid].start < from) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The box under x (in the same units as start/end), tolerating `slop` on both sides; the narrowest wins.
export function hitTest<T extends { start: number; end: number }>(boxes: readonly T[], x: number, slop: number): T | undefined {
  let best: T | undefined;
  for (const box of boxes) {
    if (x >= box.start - slop && x <= box.end + slop) {
      if (!best || box.end - box.start < best.end - best.start) best = box;
    }
  }
  return best;
}
