// Pure viewport arithmetic for the timelines: time <-> pixels, pan and zoom, keyboard bindings and
// the padded window the client asks the server for. Times are microseconds.

export interface Viewport {
  start: number;
  end: number;
}

export const MIN_SPAN_US = 0.001;

export function span(view: Viewport): number {
  return view.end - view.start;
}

export function timeToX(view: Viewport, widthPx: number, timeUs: number): number {
  return ((timeUs - view.start) / span(view)) * widthPx;
}

export function xToTime(view: Viewport, widthPx: number, x: number): number {
  return view.start + (x / widthPx) * span(view);
}

// Keeps the viewport inside the data bounds (with a margin of a tenth of the bounds) and above the
// minimum span, preserving its width where possible.
export function clampView(view: Viewport, bounds: Viewport): Viewport {
  const margin = span(bounds) * 0.1;
  const lo = bounds.start - margin;
  const hi = bounds.end + margin;
  let width = Math.max(MIN_SPAN_US, Math.min(span(view), hi - lo));
  let start = view.start;
  if (start < lo) start = lo;
  if (start + width > hi) start = hi - width;
  if (!Number.isFinite(width)) width = MIN_SPAN_US;
  return { start, end: start + width };
}

// factor < 1 zooms in; the time under `anchorUs` stays where it is on screen.
export function zoom(view: Viewport, factor: number, anchorUs: number, bounds: Viewport): Viewport {
  const width = Math.max(MIN_SPAN_US, span(view) * factor);
  const anchorFraction = (anchorUs - view.start) / span(view);
  const start = anchorUs - anchorFraction * width;
  return clampView({ start, end: start + width }, bounds);
}

// fraction of the visible span; positive moves later in time.
export function pan(view: Viewport, fraction: number, bounds: Viewport): Viewport {
  const delta = span(view) * fraction;
  return clampView({ start: view.start + delta, end: view.end + delta }, bounds);
}

export function fit(bounds: Viewport, paddingFraction = 0.02): Viewport {
  const width = Math.max(MIN_SPAN_US, span(bounds));
  const pad = width * paddingFraction;
  return { start: bounds.start - pad, end: bounds.end + pad };
}

// Centres on [start, start + dur] leaving a margin so the event is clearly visible.
export function focusOn(startUs: number, durUs: number, bounds: Viewport): Viewport {
  const width = Math.max(durUs * 3, MIN_SPAN_US * 10);
  const centre = startUs + durUs / 2;
  return clampView({ start: centre - width / 2, end: centre + width / 2 }, bounds);
}

export type KeyAction = { kind: 'zoom'; factor: number } | { kind: 'pan'; fraction: number } | { kind: 'none' };

// W/S and ArrowUp/ArrowDown zoom in/out, A/D and ArrowLeft/ArrowRight pan (Perfetto's bindings).
export function keyAction(key: string, shift = false): KeyAction {
  const zoomStep = shift ? 0.5 : 0.8;
  const panStep = shift ? 0.5 : 0.2;
  switch (key.length === 1 ? key.toLowerCase() : key) {
    case 'w':
    case 'ArrowUp':
      return { kind: 'zoom', factor: zoomStep };
    case 's':
    case 'ArrowDown':
      return { kind: 'zoom', factor: 1 / zoomStep };
    case 'a':
    case 'ArrowLeft':
      return { kind: 'pan', fraction: -panStep };
    case 'd':
    case 'ArrowRight':
      return { kind: 'pan', fraction: panStep };
    default:
      return { kind: 'none' };
  }
}

export interface FetchWindow extends Viewport {
  widthPx: number;
}

// What to ask the server for: the view plus half its span on each side, at the same pixel density,
// so small pans reuse the answer.
export function paddedWindow(view: Viewport, widthPx: number): FetchWindow {
  const pad = span(view) / 2;
  return { start: view.start - pad, end: view.end + pad, widthPx: Math.max(1, Math.round(widthPx * 2)) };
}

// A cached window still serves the view when it covers it and its pixel density is within 1.5x.
export function windowCovers(cached: FetchWindow, view: Viewport, widthPx: number): boolean {
  if (cached.start > view.start || cached.end < view.end) return false;
  const cachedPixel = span(cached) / cached.widthPx;
  const viewPixel = span(view) / Math.max(1, widthPx);
  return cachedPixel <= viewPixel * 1.5 && cachedPixel >= viewPixel / 1.5;
}

// Tick marks: a 1-2-5 step giving about `targetCount` ticks over the view.
export function ticks(view: Viewport, targetCount: number): number[] {
  const raw = span(view) / Math.max(1, targetCount);
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? magnitude * 10;
  const out: number[] = [];
  for (let t = Math.ceil(view.start / step) * step; t <= view.end; t += step) out.push(t);
  return out;
}

export function formatDuration(us: number): string {
  const abs = Math.abs(us);
  if (abs >= 1e6) return `${(us / 1e6).toFixed(3)} s`;
  if (abs >= 1e3) return `${(us / 1e3).toFixed(3)} ms`;
  if (abs >= 1) return `${us.toFixed(3)} us`;
  return `${(us * 1e3).toFixed(1)} ns`;
}
