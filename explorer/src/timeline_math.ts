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
  const step = tickStep(span(view), targetCount);
  const out: number[] = [];
  // Multiples of the step, not a running sum (which drifts at large offsets).
  for (let k = Math.ceil(view.start / step); k * step <= view.end; k++) out.push(k * step);
  return out;
}

export function formatDuration(us: number): string {
  const abs = Math.abs(us);
  if (abs >= 1e6) return `${(us / 1e6).toFixed(3)} s`;
  if (abs >= 1e3) return `${(us / 1e3).toFixed(3)} ms`;
  if (abs >= 1) return `${us.toFixed(3)} us`;
  return `${(us * 1e3).toFixed(1)} ns`;
}

// A time written with as many decimals as `resolutionUs` needs, in the unit its magnitude calls for
// (12.32605 ms at 50 ns resolution; 250 us at 50 us). formatDuration's fixed three decimals repeat the
// same label on every tick once the ticks are closer than the third decimal.
export function formatTime(us: number, resolutionUs: number): string {
  const abs = Math.abs(us);
  const units: [number, string][] = [[1e6, 's'], [1e3, 'ms'], [1, 'us'], [1e-3, 'ns']];
  const [scale, unit] = units.find(([s]) => abs >= s) ?? units[units.length - 1];
  const resolution = Math.max(resolutionUs, 1e-6) / scale;
  const decimals = Math.min(9, Math.max(0, Math.ceil(-Math.log10(resolution) - 1e-9)));
  const text = (us / scale).toFixed(decimals);
  return `${/^-0(\.0*)?$/.test(text) ? text.slice(1) : text} ${unit}`;
}

export interface RulerTick {
  time: number; // absolute, the view's time base
  label: string;
}

export interface Ruler {
  step: number;
  // When the ticks lie far from the origin compared with their spacing, they are labelled as offsets
  // from this base (Perfetto's "12.32600 ms" + "+50 ns", "+100 ns" ...); absent when absolute labels are
  // short enough.
  base?: { time: number; label: string };
  ticks: RulerTick[];
}

// Ticks on a 1-2-5 step for about `targetCount` of them over the view, labelled relative to `origin`
// (the profile's start) with the precision the step needs.
export function ruler(view: Viewport, targetCount: number, origin = 0): Ruler {
  const times = ticks({ start: view.start - origin, end: view.end - origin }, targetCount);
  const step = times.length > 1 ? times[1] - times[0] : tickStep(span(view), targetCount);
  const first = times[0] ?? view.start - origin;
  if (Math.abs(first) / step < 1000) {
    return { step, ticks: times.map((t) => ({ time: t + origin, label: formatTime(t, step) })) };
  }
  const baseStep = step * 10;
  const base = Math.floor((view.start - origin) / baseStep) * baseStep;
  return {
    step,
    base: { time: base + origin, label: formatTime(base, baseStep) },
    ticks: times.map((t) => ({ time: t + origin, label: `+${formatTime(Math.round((t - base) / step) * step, step)}` })),
  };
}

function tickStep(spanUs: number, targetCount: number): number {
  const raw = spanUs / Math.max(1, targetCount);
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? magnitude * 10;
}

// The view a profile opens on: its device executions and the ops that launched them (from the first
// launching op to the end of the last execution), with a margin of a twentieth of that on each side;
// the whole profile when it has no execution. Fitting the whole step instead leaves the executions a
// pixel or two wide when the step is mostly the host waiting on the device.
export function activityView(activity: Viewport[], bounds: Viewport): Viewport {
  if (activity.length === 0) return fit(bounds);
  const start = Math.min(...activity.map((a) => a.start));
  const end = Math.max(...activity.map((a) => a.end));
  const pad = Math.max(span({ start, end }) * 0.05, MIN_SPAN_US * 10);
  return clampView({ start: start - pad, end: end + pad }, bounds);
}

// The view that shows a found event: unchanged when it is on screen and at least `minPx` wide (a box
// narrower than that cannot be told from its neighbours),
// otherwise centred on it at a third of the view (zoomed in or out as needed).
export function revealEvent(view: Viewport, widthPx: number, ts: number, dur: number, bounds: Viewport,
  minPx = 2): Viewport {
  const onScreen = ts >= view.start && ts + dur <= view.end;
  const wide = (dur / span(view)) * widthPx >= minPx;
  if (onScreen && wide) return view;
  return focusOn(ts, dur, bounds);
}

export interface AreaRow {
  name: string;
  count: number;
  durationUs: number; // the events' time inside the range
}

// Perfetto's area selection summary: the events a time range covers, by name, with their count and the
// time they spend inside the range (a merged box counts its events, its time shared by them), most time
// first.
export function summarizeArea(range: Viewport,
  events: readonly { name: string; ts: number; dur: number; count?: number }[]): AreaRow[] {
  const rows = new Map<string, AreaRow>();
  for (const e of events) {
    if (!(e.ts < range.end && e.ts + e.dur > range.start)) continue;
    const inside = Math.min(range.end, e.ts + e.dur) - Math.max(range.start, e.ts);
    let row = rows.get(e.name);
    if (!row) {
      row = { name: e.name, count: 0, durationUs: 0 };
      rows.set(e.name, row);
    }
    row.count += e.count ?? 1;
    row.durationUs += Math.max(0, inside);
  }
  return [...rows.values()].sort((a, b) => b.durationUs - a.durationUs || b.count - a.count || (a.name < b.name ? -1 : 1));
}
