// The system timeline: canvas lanes grouped instance/PID/subsystem, a time axis, hover details,
// click to select, and the flows of the selected event drawn as arrows. Data comes from the server's
// windowed query, re-fetched only when the view leaves the padded window it already holds.

import { api, type EventSummary, type LanesAnswer, type WindowAnswer } from './api';
import { MERGED_COLOR, colorFor } from './colors';
import {
  GROUP_HEADER_HEIGHT, ROW_HEIGHT, groupLanes, layoutLanes, type GroupingMode, type LaneGroup, type Layout,
} from './lanes';
import { recordFrame } from './frames';
import { escapeHtml } from './html';
import { hitTest } from './merge';
import {
  clampView, fit, focusOn, formatDuration, formatTime, keyAction, pan, paddedWindow, revealEvent, ruler, span,
  summarizeArea, timeToX, windowCovers, xToTime, zoom, type AreaRow, type FetchWindow, type Ruler, type Viewport,
} from './timeline_math';

export { escapeHtml };

export const LABEL_WIDTH = 280;
const AXIS_HEIGHT = 24;

interface DrawnBox {
  start: number; // x pixels within the plot
  end: number;
  y: number;
  height: number;
  id?: number;
  label: string;
  count: number;
  ts: number;
  dur: number;
}

export interface FlowArrow {
  from: EventSummary;
  to: EventSummary;
  category: string;
}

export interface TimelineCallbacks {
  onSelect(id: number | undefined): void;
  onViewChange(view: Viewport): void;
  onMeasure?(range: Viewport | undefined, rows: AreaRow[]): void; // a measured range (area selection) ended
}

export interface TimelineOptions {
  initial?: Viewport; // the first view; the whole profile when absent
  // Length of the time axis from the profile's start, when it must match another timeline's (Compare
  // stacks two profiles on one axis); the profile's own span when absent.
  span?: number;
  testid?: string;
}

export class TimelineView {
  readonly canvas: HTMLCanvasElement;
  private readonly tooltip: HTMLDivElement;
  readonly bounds: Viewport;
  view: Viewport;
  private groups: LaneGroup[] = [];
  private layout: Layout = { lanes: [], groups: [], height: 0 };
  private readonly collapsed = new Set<string>();
  private cached?: { window: FetchWindow; data: WindowAnswer };
  private fetching = false;
  private drawn: DrawnBox[] = [];
  private selected?: EventSummary;
  private flows: FlowArrow[] = [];
  private highlighted = new Set<string>();
  private drag?: { x: number; view: Viewport };
  // Drag-to-measure (Shift+drag on the lanes, or drag on the ruler): the range, and while the button
  // is down the time it started at.
  private measuring?: number;
  measure?: Viewport;
  mark?: Viewport; // M: the selection's (or the measured) span, kept highlighted
  private cursorX?: number; // plot pixels, while the mouse is over the plot
  lastRuler?: Ruler;
  private readonly readout: HTMLDivElement;
  private frameRequested = false;
  lastFetch: Promise<void> = Promise.resolve();

  constructor(
    readonly container: HTMLElement,
    private readonly profile: string,
    private readonly lanes: LanesAnswer,
    private readonly callbacks: TimelineCallbacks,
    options: TimelineOptions = {},
  ) {
    const span = Math.max(options.span ?? lanes.end - lanes.start, 1);
    this.bounds = { start: lanes.start, end: lanes.start + span };
    this.view = options.initial ? clampView(options.initial, this.bounds) : fit(this.bounds);
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'timeline-canvas';
    this.canvas.dataset.testid = options.testid ?? 'system-timeline';
    this.tooltip = document.createElement('div');
    // Fixed, kept inside the window: an absolute tooltip under the last lane grew the scrolling wrap
    // (scrollbars flickered) and was clipped by it and by the right edge.
    this.tooltip.className = 'tooltip floating';
    this.readout = document.createElement('div');
    this.readout.className = 'timeline-readout';
    this.readout.dataset.testid = `${options.testid ?? 'system-timeline'}-readout`;
    container.append(this.readout, this.canvas, this.tooltip);
    this.setGrouping('default');
    this.attachInput();
    this.updateReadout();
    new ResizeObserver(() => this.requestDraw()).observe(container);
  }

  setGrouping(mode: GroupingMode): void {
    this.groups = groupLanes(this.lanes.lanes, mode);
    this.relayout();
  }

  private relayout(): void {
    this.layout = layoutLanes(this.groups, this.collapsed);
    this.requestDraw();
  }

  private plotWidth(): number {
    return Math.max(100, this.container.clientWidth - LABEL_WIDTH);
  }

  // notify = false when the change comes from a timeline this one follows (no echo back).
  setView(view: Viewport, notify = true): void {
    this.view = clampView(view, this.bounds);
    if (notify) this.callbacks.onViewChange(this.view);
    if (this.measure || this.mark || this.cursorX !== undefined) this.updateReadout();
    this.requestDraw();
  }

  fitAll(): void {
    this.setView(fit(this.bounds));
  }

  // M: marks the selection's span (or the measured range), again to clear it.
  toggleMark(): void {
    const next = this.measure ?? (this.selected ? { start: this.selected.ts, end: this.selected.ts + this.selected.dur } : undefined);
    this.mark = this.mark && (!next || (this.mark.start === next.start && this.mark.end === next.end)) ? undefined : next;
    this.updateReadout();
    this.requestDraw();
  }

  select(event: EventSummary | undefined, flows: FlowArrow[] = [], reveal = true): void {
    this.selected = event;
    this.flows = flows;
    if (event && reveal) {
      const shown = revealEvent(this.view, this.plotWidth(), event.ts, event.dur, this.bounds);
      if (shown !== this.view) this.setView(shown);
    }
    this.requestDraw();
  }

  zoomToSelection(): void {
    if (this.selected) this.setView(focusOn(this.selected.ts, this.selected.dur, this.bounds));
  }

  // The group headers and the lanes in drawing order (the labels are on the canvas; tests read them here).
  get drawnLanes(): { groups: string[]; lanes: string[] } {
    return { groups: this.layout.groups.map((g) => g.group.label), lanes: this.layout.lanes.map((l) => l.lane.name) };
  }

  // The flow arrows drawn (the selection's dependency tree).
  get arrows(): readonly FlowArrow[] {
    return this.flows;
  }

  highlightNames(names: string[]): void {
    this.highlighted = new Set(names);
    this.requestDraw();
  }

  handleKey(event: KeyboardEvent): boolean {
    if (event.key === '0') {
      this.fitAll();
      return true;
    }
    if (event.key === 'm' || event.key === 'M') {
      this.toggleMark();
      return true;
    }
    const action = keyAction(event.key, event.shiftKey);
    if (action.kind === 'zoom') {
      // Around the mouse when it is over the plot (Perfetto), else the selection, else the centre.
      const centre = (this.view.start + this.view.end) / 2;
      const anchor = this.cursorX !== undefined ? xToTime(this.view, this.plotWidth(), this.cursorX)
        : this.selected && this.selected.ts >= this.view.start && this.selected.ts <= this.view.end
          ? this.selected.ts + this.selected.dur / 2 : centre;
      this.setView(zoom(this.view, action.factor, anchor, this.bounds));
      return true;
    }
    if (action.kind === 'pan') {
      this.setView(pan(this.view, action.fraction, this.bounds));
      return true;
    }
    return false;
  }

  // Screen rectangle of a drawn event (for tests and for scrolling it into view).
  boxOf(id: number): DOMRect | undefined {
    const box = this.drawn.find((b) => b.id === id);
    if (!box) return undefined;
    const rect = this.canvas.getBoundingClientRect();
    return new DOMRect(rect.left + LABEL_WIDTH + box.start, rect.top + box.y, Math.max(1, box.end - box.start), box.height);
  }

  private attachInput(): void {
    this.canvas.addEventListener('mousemove', (e) => this.onMouseMove(e));
    this.canvas.addEventListener('mouseleave', () => {
      this.tooltip.style.display = 'none';
      this.cursorX = undefined;
      this.updateReadout();
      this.requestDraw();
    });
    this.canvas.addEventListener('mousedown', (e) => {
      const plotX = e.offsetX - LABEL_WIDTH;
      if (plotX >= 0 && (e.shiftKey || e.offsetY < AXIS_HEIGHT)) {
        this.measuring = xToTime(this.view, this.plotWidth(), plotX);
        this.measure = undefined;
        e.preventDefault(); // no text selection while measuring
        return;
      }
      this.drag = { x: e.offsetX, view: this.view };
    });
    window.addEventListener('mouseup', (e) => {
      if (this.measuring !== undefined) {
        this.measuring = undefined;
        if (this.measure && span(this.measure) <= 0) this.measure = undefined;
        this.updateReadout();
        this.requestDraw();
        this.callbacks.onMeasure?.(this.measure, this.measure ? this.areaRows(this.measure) : []);
        return;
      }
      if (!this.drag) return;
      const moved = Math.abs(e.clientX - (this.canvas.getBoundingClientRect().left + this.drag.x));
      this.drag = undefined;
      if (moved < 3 && e.target === this.canvas) this.onClick(e);
    });
    // Perfetto's wheel: plain wheel scrolls the lanes, Ctrl+wheel (and a pinch) zooms at the mouse,
    // Shift+wheel or a sideways wheel pans.
    this.canvas.addEventListener('wheel', (e) => {
      const x = e.offsetX - LABEL_WIDTH;
      if (e.ctrlKey || e.metaKey) {
        e.preventDefault();
        const anchor = x >= 0 ? xToTime(this.view, this.plotWidth(), x) : (this.view.start + this.view.end) / 2;
        this.setView(zoom(this.view, Math.exp(e.deltaY * 0.002), anchor, this.bounds));
      } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        e.preventDefault();
        const delta = Math.abs(e.deltaX) > Math.abs(e.deltaY) ? e.deltaX : e.deltaY;
        this.setView(pan(this.view, delta / this.plotWidth(), this.bounds));
      }
    }, { passive: false });
  }

  private onMouseMove(e: MouseEvent): void {
    const plotX = e.offsetX - LABEL_WIDTH;
    this.cursorX = plotX >= 0 ? plotX : undefined;
    if (this.measuring !== undefined) {
      const t = xToTime(this.view, this.plotWidth(), Math.max(0, plotX));
      this.measure = { start: Math.min(this.measuring, t), end: Math.max(this.measuring, t) };
      this.tooltip.style.display = 'none';
      this.updateReadout();
      this.requestDraw();
      return;
    }
    if (this.drag) {
      const dx = e.offsetX - this.drag.x;
      this.setView(pan(this.drag.view, -dx / this.plotWidth(), this.bounds));
      return;
    }
    this.updateReadout();
    this.requestDraw();
    const box = this.boxAt(e.offsetX, e.offsetY);
    if (!box) {
      this.tooltip.style.display = 'none';
      return;
    }
    const count = box.count > 1 ? `<div>${box.count} events merged (zoom in to see them)</div>` : '';
    this.tooltip.innerHTML = `<b>${escapeHtml(box.label)}</b><div>start ${formatDuration(box.ts - this.bounds.start)}</div>` +
      `<div>duration ${formatDuration(box.dur)}</div>${count}`;
    placeTooltip(this.tooltip, e.clientX, e.clientY);
  }

  // The line under the ruler: the time at the cursor and the measured range, at the view's precision.
  private updateReadout(): void {
    const pixel = span(this.view) / this.plotWidth();
    const at = (t: number) => formatTime(t - this.bounds.start, pixel);
    const parts: string[] = [];
    if (this.cursorX !== undefined) {
      parts.push(`<span data-testid="cursor-time">cursor ${at(xToTime(this.view, this.plotWidth(), this.cursorX))}</span>`);
    }
    if (this.measure) {
      const covered = this.eventsIn(this.measure);
      parts.push(`<span data-testid="measure">Δ ${formatTime(span(this.measure), pixel)} (${at(this.measure.start)} → ` +
        `${at(this.measure.end)}), ${covered.events} event(s) on ${covered.lanes} lane(s)</span>`);
    }
    if (this.mark) parts.push(`<span data-testid="mark">marked ${formatTime(span(this.mark), pixel)} from ${at(this.mark.start)}</span>`);
    this.readout.innerHTML = parts.length > 0 ? parts.join(' · ')
      : '<span class="muted">Shift+drag or drag the ruler to measure · ? for keys</span>';
  }

  // The area summary of a range, from the window the view holds.
  areaRows(range: Viewport): AreaRow[] {
    const events = (this.cached?.data.lanes ?? []).flatMap((lane) => [...lane.events, ...lane.merged]);
    return summarizeArea(range, events);
  }

  clearMeasure(): void {
    if (!this.measure) return;
    this.measure = undefined;
    this.updateReadout();
    this.requestDraw();
    this.callbacks.onMeasure?.(undefined, []);
  }

  // What a measured range covers, from the window the view holds (merged boxes count their events).
  private eventsIn(range: Viewport): { events: number; lanes: number } {
    let events = 0;
    let lanes = 0;
    for (const lane of this.cached?.data.lanes ?? []) {
      let here = 0;
      for (const e of lane.events) if (e.ts < range.end && e.ts + e.dur > range.start) here++;
      for (const m of lane.merged) if (m.ts < range.end && m.ts + m.dur > range.start) here += m.count;
      events += here;
      if (here > 0) lanes++;
    }
    return { events, lanes };
  }

  private onClick(e: MouseEvent): void {
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    if (x < LABEL_WIDTH) {
      const group = this.layout.groups.find((g) => y >= AXIS_HEIGHT + g.y && y < AXIS_HEIGHT + g.y + GROUP_HEADER_HEIGHT);
      if (group) {
        if (this.collapsed.has(group.group.key)) this.collapsed.delete(group.group.key);
        else this.collapsed.add(group.group.key);
        this.relayout();
      }
      return;
    }
    const box = this.boxAt(x, y);
    if (box && box.id !== undefined) this.callbacks.onSelect(box.id);
    else if (box) this.setView(focusOn(box.ts, box.dur, this.bounds));
    else this.callbacks.onSelect(undefined);
  }

  private boxAt(x: number, y: number): DrawnBox | undefined {
    const px = x - LABEL_WIDTH;
    const row = this.drawn.filter((b) => y >= b.y && y < b.y + b.height);
    return hitTest(row, px, 2);
  }

  // One window query at a time: while it runs, frames draw what is cached; its answer triggers a draw,
  // which asks for the view of that moment if it moved on meanwhile. (Asking on every frame of a pan
  // would queue a query per frame on the server and leave the newest behind all of them.) A failed
  // query does not retry by itself; the next change of view does.
  private ensureData(): void {
    const width = this.plotWidth();
    if (this.fetching || (this.cached && windowCovers(this.cached.window, this.view, width))) return;
    const window = paddedWindow(this.view, width);
    this.fetching = true;
    this.lastFetch = api.events(this.profile, window.start, window.end, window.widthPx).then((data) => {
      this.fetching = false;
      this.cached = { window, data };
      this.requestDraw();
    }, (error: unknown) => {
      this.fetching = false;
      throw error;
    });
  }

  requestDraw(): void {
    if (this.frameRequested) return;
    this.frameRequested = true;
    requestAnimationFrame(() => {
      this.frameRequested = false;
      this.draw();
    });
  }

  private laneY(laneId: number): number | undefined {
    return this.layout.lanes.find((l) => l.lane.id === laneId)?.y;
  }

  draw(): void {
    const started = performance.now();
    this.ensureData();
    const dpr = window.devicePixelRatio || 1;
    const width = this.container.clientWidth;
    const height = this.layout.height + AXIS_HEIGHT + 8;
    if (this.canvas.width !== Math.round(width * dpr) || this.canvas.height !== Math.round(height * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
    }
    const ctx = this.canvas.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    const plot = this.plotWidth();
    const x = (t: number) => LABEL_WIDTH + timeToX(this.view, plot, t);

    // Ruler and grid: offsets from a base when zoomed in far from the start (see ruler()).
    ctx.fillStyle = '#f4f5f7';
    ctx.fillRect(0, 0, width, AXIS_HEIGHT);
    ctx.strokeStyle = '#e3e5e8';
    ctx.fillStyle = '#444';
    const axis = ruler(this.view, Math.max(2, Math.floor(plot / 110)), this.bounds.start);
    this.lastRuler = axis;
    for (const tick of axis.ticks) {
      const tx = x(tick.time);
      ctx.beginPath();
      ctx.moveTo(tx, AXIS_HEIGHT - 6);
      ctx.lineTo(tx, height);
      ctx.stroke();
      ctx.fillText(tick.label, tx + 3, AXIS_HEIGHT / 2);
    }
    ctx.fillStyle = '#1d2733';
    ctx.fillText(`${axis.base ? `${axis.base.label} +` : ''}  ${formatDuration(span(this.view))} visible`, 8, AXIS_HEIGHT / 2);

    // Group headers and lane labels.
    for (const g of this.layout.groups) {
      const y = AXIS_HEIGHT + g.y;
      ctx.fillStyle = '#dde3ec';
      ctx.fillRect(0, y, width, GROUP_HEADER_HEIGHT);
      ctx.fillStyle = '#1d2733';
      ctx.font = 'bold 11px system-ui, sans-serif';
      ctx.fillText(`${g.collapsed ? '▸' : '▾'} ${g.group.label}`, 6, y + GROUP_HEADER_HEIGHT / 2);
      ctx.font = '11px system-ui, sans-serif';
    }
    for (const l of this.layout.lanes) {
      const y = AXIS_HEIGHT + l.y;
      ctx.fillStyle = '#555';
      const label = l.lane.name.split('/').at(-1) ?? l.lane.name;
      ctx.fillText(`${label}  (${l.lane.events})`, 18, y + ROW_HEIGHT / 2 + 2);
      ctx.strokeStyle = '#eceef1';
      ctx.beginPath();
      ctx.moveTo(0, y + l.height);
      ctx.lineTo(width, y + l.height);
      ctx.stroke();
    }

    // Events.
    this.drawn = [];
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_WIDTH, AXIS_HEIGHT, plot, height);
    ctx.clip();
    const data = this.cached?.data;
    if (data) {
      // The cached window is twice the view: boxes off screen are skipped, not drawn into the clip.
      const visible = (x0: number, x1: number) => x1 >= LABEL_WIDTH && x0 <= LABEL_WIDTH + plot;
      for (const laneData of data.lanes) {
        const laneTop = this.laneY(laneData.lane);
        if (laneTop === undefined) continue;
        // Merged boxes share one colour and, zoomed out, lie about a pixel apart: each row's run of boxes
        // with sub-pixel gaps becomes one rectangle, all filled at once. (Rasterizing thousands of
        // one-pixel rectangles costs far more than recording them.)
        ctx.fillStyle = MERGED_COLOR;
        ctx.beginPath();
        const runs = new Map<number, { start: number; end: number; height: number }>();
        for (const m of laneData.merged) {
          const x0 = x(m.ts);
          const x1 = x(m.ts + m.dur);
          if (!visible(x0, x1)) continue;
          const box = this.box(x0, x1, AXIS_HEIGHT + laneTop + 2 + m.depth * ROW_HEIGHT, m.name, m.count, m.ts, m.dur);
          const run = runs.get(box.y);
          if (run && box.start <= run.end + 1 && box.end >= run.start - 1) {
            run.start = Math.min(run.start, box.start);
            run.end = Math.max(run.end, box.end);
            continue;
          }
          if (run) ctx.rect(run.start + LABEL_WIDTH, box.y, run.end - run.start, run.height);
          runs.set(box.y, { start: box.start, end: box.end, height: box.height });
        }
        for (const [y, run] of runs) ctx.rect(run.start + LABEL_WIDTH, y, run.end - run.start, run.height);
        ctx.fill();
        for (const e of laneData.events) {
          const x0 = x(e.ts);
          const x1 = x(e.ts + e.dur);
          if (!visible(x0, x1)) continue;
          const box = this.box(x0, x1, AXIS_HEIGHT + laneTop + 2 + e.depth * ROW_HEIGHT, e.name, 1, e.ts, e.dur, e.id);
          const dim = this.highlighted.size > 0 && !this.highlighted.has(e.name);
          ctx.globalAlpha = dim ? 0.25 : 1;
          ctx.fillStyle = colorFor(e.name);
          ctx.fillRect(box.start + LABEL_WIDTH, box.y, box.end - box.start, box.height);
          ctx.globalAlpha = 1;
          if (box.end - box.start > 30) {
            ctx.fillStyle = '#fff';
            const textX = Math.max(box.start, 0) + LABEL_WIDTH + 3;
            ctx.fillText(fitText(ctx, e.name, box.end - Math.max(box.start, 0) - 6), textX, box.y + box.height / 2);
          }
          if (this.selected?.id === e.id) {
            ctx.strokeStyle = '#111';
            ctx.lineWidth = 2;
            ctx.strokeRect(box.start + LABEL_WIDTH - 1, box.y - 1, box.end - box.start + 2, box.height + 2);
            ctx.lineWidth = 1;
          }
        }
      }
    }
    this.drawFlows(ctx, x);
    this.drawRanges(ctx, x, height);
    ctx.restore();
    const complete = this.cached !== undefined && windowCovers(this.cached.window, this.view, plot);
    recordFrame({ at: started, drawMs: performance.now() - started, complete, boxes: this.drawn.length });
  }

  private box(x0: number, x1: number, y: number, label: string, count: number, ts: number, dur: number, id?: number) {
    const start = x0 - LABEL_WIDTH;
    const end = Math.max(x1 - LABEL_WIDTH, start + 1);
    const box: DrawnBox = { start, end, y, height: ROW_HEIGHT - 2, id, label, count, ts, dur };
    this.drawn.push(box);
    return box;
  }

  // The mark, the measured range and the cursor line, over the lanes and into the ruler.
  private drawRanges(ctx: CanvasRenderingContext2D, x: (t: number) => number, height: number): void {
    ctx.restore();
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_WIDTH, 0, this.plotWidth(), height);
    ctx.clip();
    const band = (range: Viewport, fill: string, edge: string) => {
      const x0 = x(range.start);
      const x1 = Math.max(x0 + 1, x(range.end));
      ctx.fillStyle = fill;
      ctx.fillRect(x0, 0, x1 - x0, height);
      ctx.strokeStyle = edge;
      ctx.beginPath();
      ctx.moveTo(x0 + 0.5, 0);
      ctx.lineTo(x0 + 0.5, height);
      ctx.moveTo(x1 - 0.5, 0);
      ctx.lineTo(x1 - 0.5, height);
      ctx.stroke();
    };
    if (this.mark) band(this.mark, 'rgba(234, 179, 8, 0.15)', '#ca8a04');
    if (this.measure) {
      band(this.measure, 'rgba(37, 99, 235, 0.12)', '#2563eb');
      const label = `Δ ${formatTime(span(this.measure), span(this.view) / this.plotWidth())}`;
      ctx.fillStyle = '#1d4ed8';
      ctx.fillRect(x(this.measure.start), 0, ctx.measureText(label).width + 8, AXIS_HEIGHT);
      ctx.fillStyle = '#fff';
      ctx.fillText(label, x(this.measure.start) + 4, AXIS_HEIGHT / 2);
    }
    if (this.cursorX !== undefined && this.measuring === undefined && !this.drag) {
      const cx = LABEL_WIDTH + this.cursorX;
      ctx.strokeStyle = 'rgba(17, 24, 39, 0.55)';
      ctx.beginPath();
      ctx.moveTo(cx + 0.5, 0);
      ctx.lineTo(cx + 0.5, height);
      ctx.stroke();
    }
  }

  private drawFlows(ctx: CanvasRenderingContext2D, x: (t: number) => number): void {
    for (const flow of this.flows) {
      const fromLane = this.laneY(flow.from.lane);
      const toLane = this.laneY(flow.to.lane);
      if (fromLane === undefined || toLane === undefined) continue;
      const x0 = x(flow.from.ts);
      const y0 = AXIS_HEIGHT + fromLane + 2 + flow.from.depth * ROW_HEIGHT + ROW_HEIGHT / 2;
      const x1 = x(flow.to.ts);
      const y1 = AXIS_HEIGHT + toLane + 2 + flow.to.depth * ROW_HEIGHT + ROW_HEIGHT / 2;
      ctx.strokeStyle = flow.category === 'ac2g' ? '#c2410c' : '#1d4ed8';
      ctx.fillStyle = ctx.strokeStyle;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(x0, y0);
      const bend = Math.max(20, Math.abs(y1 - y0) / 2);
      ctx.bezierCurveTo(x0 + bend, y0, x1 - bend, y1, x1, y1);
      ctx.stroke();
      const angle = Math.atan2(y1 - y0, Math.max(1, x1 - (x1 - bend)));
      ctx.beginPath();
      ctx.moveTo(x1, y1);
      ctx.lineTo(x1 - 8 * Math.cos(angle - 0.4), y1 - 8 * Math.sin(angle - 0.4));
      ctx.lineTo(x1 - 8 * Math.cos(angle + 0.4), y1 - 8 * Math.sin(angle + 0.4));
      ctx.fill();
      ctx.lineWidth = 1;
    }
  }
}

// Shows a tooltip next to the mouse (client coordinates), flipped to the other side of it where it would
// cross the window's right or bottom edge.
export function placeTooltip(tooltip: HTMLElement, clientX: number, clientY: number): void {
  tooltip.style.display = 'block';
  const width = tooltip.offsetWidth;
  const height = tooltip.offsetHeight;
  const room = document.documentElement.clientWidth;
  const bottom = document.documentElement.clientHeight;
  let left = clientX + 14;
  let top = clientY + 12;
  if (left + width > room - 4) left = Math.max(4, clientX - 14 - width);
  if (top + height > bottom - 4) top = Math.max(4, clientY - 12 - height);
  tooltip.style.left = `${left}px`;
  tooltip.style.top = `${top}px`;
}

export function fitText(ctx: CanvasRenderingContext2D, text: string, width: number): string {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= width) lo = mid;
    else hi = mid - 1;
  }
  return lo > 0 ? `${text.slice(0, lo)}…` : '';
}
