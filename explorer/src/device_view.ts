// The device timeline of one execution: one row per engine (Tensor, Vector, Scalar, GpSimd) and per DMA
// queue, instructions coloured by the framework op they come from. Wheel zooms, drag pans, Shift+drag
// selects a range and summarises it per row.

import type { DeviceAnswer, DeviceRecord } from './api';
import { MERGED_COLOR, colorFor } from './colors';
import {
  colourKey, counterTracks, formatBytes, legendKeys, summarizeRange, type ColourMode, type CounterTracks,
} from './device_summary';
import { hitTest, mergeSubPixel } from './merge';
import { clampView, fit, formatTime, pan, ruler, timeToX, xToTime, zoom, type Ruler, type Viewport } from './timeline_math';
import { escapeHtml, fitText, placeTooltip } from './timeline_view';

const ROW = 22;
const AXIS = 20;
const COUNTER = 24; // height of each counter track
const COUNTERS = ['HBM GB/s', 'Engines busy', 'DMA queues busy'];
const TOP = AXIS + COUNTER * COUNTERS.length; // the first instruction row

interface Placed {
  start: number;
  end: number;
  row: number;
  record: DeviceRecord;
  count: number;
}

export class DeviceView {
  private readonly canvas = document.createElement('canvas');
  private readonly tooltip = document.createElement('div');
  private readonly summary = document.createElement('div');
  private readonly bounds: Viewport;
  private view: Viewport;
  private placed: Placed[] = [];
  private drag?: { x: number; view: Viewport; select: boolean; current: number };
  private selection?: Viewport;
  private cursorX?: number;
  lastRuler?: Ruler; // the axis last drawn, in microseconds from the execution's start
  colourMode: ColourMode = 'op';
  lastCounters?: CounterTracks; // the counter tracks last drawn (over the view)
  private readonly legend = document.createElement('div');

  constructor(
    container: HTMLElement,
    private readonly data: DeviceAnswer,
  ) {
    this.bounds = { start: 0, end: Math.max(data.duration_ns, 1) };
    this.view = fit(this.bounds);
    container.innerHTML = '';
    const header = document.createElement('div');
    header.className = 'device-header';
    header.innerHTML = `<b>${escapeHtml(data.executable)}</b> · core ${data.core} · sequence ${data.sequence} · ` +
      `${(data.duration_ns / 1000).toFixed(3)} us on device · ${data.executions} captured execution(s)`;
    const body = document.createElement('div');
    body.className = 'device-body';
    const labels = document.createElement('div');
    labels.className = 'device-labels';
    labels.style.paddingTop = `${AXIS}px`;
    for (const name of COUNTERS) {
      const label = document.createElement('div');
      label.className = 'device-counter-label';
      label.textContent = name;
      label.style.height = `${COUNTER}px`;
      labels.append(label);
    }
    for (const row of data.rows) {
      const label = document.createElement('div');
      label.className = 'device-row-label';
      label.dataset.engine = row.engine;
      label.textContent = `${row.name} (${row.records.length})`;
      label.style.height = `${ROW}px`;
      labels.append(label);
    }
    const plot = document.createElement('div');
    plot.className = 'device-plot';
    this.canvas.dataset.testid = 'device-timeline';
    this.tooltip.className = 'tooltip floating';
    plot.append(this.canvas, this.tooltip);
    body.append(labels, plot);
    const controls = document.createElement('div');
    controls.className = 'device-controls';
    controls.innerHTML = '<label>Colour by <select data-testid="device-colour"><option value="op">source op</option>' +
      '<option value="engine">engine</option><option value="opcode">opcode</option></select></label>';
    const select = controls.querySelector('select') as HTMLSelectElement;
    select.addEventListener('change', () => {
      this.colourMode = select.value as ColourMode;
      this.renderLegend();
      this.draw();
    });
    this.legend.className = 'legend';
    this.legend.dataset.testid = 'device-legend';
    this.renderLegend();
    const legend = this.legend;
    this.summary.className = 'device-summary';
    this.summary.textContent = 'Shift+drag to summarise a range; Ctrl+wheel zooms, drag or Shift+wheel pans, W/A/S/D when focused.';
    container.append(header, controls, legend, body, this.summary);
    this.attachInput();
    new ResizeObserver(() => this.draw()).observe(plot);
    this.draw();
  }

  private renderLegend(): void {
    const keys = legendKeys(this.colourMode, this.data.rows, this.data.source_ops);
    const shown = keys.slice(0, 40);
    this.legend.innerHTML = shown.map((key) =>
      `<span data-key="${escapeHtml(key)}"><i style="background:${colorFor(key)}"></i>${escapeHtml(key)}</span>`).join('') +
      (keys.length > shown.length ? `<span class="muted">+${keys.length - shown.length} more</span>` : '');
  }

  private width(): number {
    return Math.max(100, (this.canvas.parentElement?.clientWidth ?? 600) - 4);
  }

  private attachInput(): void {
    // As on the system timeline: Ctrl+wheel zooms at the mouse, Shift+wheel or a sideways wheel pans,
    // a plain wheel scrolls the page.
    this.canvas.addEventListener('wheel', (e) => {
      if (e.ctrlKey || e.metaKey) {
        e.preventDefault();
        const anchor = xToTime(this.view, this.width(), e.offsetX);
        this.view = zoom(this.view, Math.exp(e.deltaY * 0.002), anchor, this.bounds);
        this.draw();
      } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        e.preventDefault();
        const delta = Math.abs(e.deltaX) > Math.abs(e.deltaY) ? e.deltaX : e.deltaY;
        this.view = pan(this.view, delta / this.width(), this.bounds);
        this.draw();
      }
    }, { passive: false });
    this.canvas.addEventListener('mousedown', (e) => {
      this.drag = { x: e.offsetX, view: this.view, select: e.shiftKey, current: e.offsetX };
    });
    this.canvas.addEventListener('mousemove', (e) => {
      if (this.drag) {
        this.drag.current = e.offsetX;
        if (this.drag.select) {
          const a = xToTime(this.view, this.width(), this.drag.x);
          const b = xToTime(this.view, this.width(), e.offsetX);
          this.selection = { start: Math.min(a, b), end: Math.max(a, b) };
        } else {
          this.view = pan(this.drag.view, -(e.offsetX - this.drag.x) / this.width(), this.bounds);
        }
        this.draw();
        return;
      }
      this.cursorX = e.offsetX;
      this.draw();
      this.hover(e.offsetX, e.offsetY, e.clientX, e.clientY);
    });
    this.canvas.addEventListener('mouseleave', () => {
      this.tooltip.style.display = 'none';
      this.cursorX = undefined;
      this.draw();
    });
    window.addEventListener('mouseup', () => {
      if (this.drag?.select && this.selection) this.showSummary(this.selection);
      this.drag = undefined;
    });
    this.canvas.tabIndex = 0;
    this.canvas.addEventListener('keydown', (e) => {
      const key = e.key.toLowerCase();
      if (key === 'w') this.view = zoom(this.view, 0.8, (this.view.start + this.view.end) / 2, this.bounds);
      else if (key === 's') this.view = zoom(this.view, 1.25, (this.view.start + this.view.end) / 2, this.bounds);
      else if (key === 'a' || e.key === 'ArrowLeft') this.view = pan(this.view, -0.2, this.bounds);
      else if (key === 'd' || e.key === 'ArrowRight') this.view = pan(this.view, 0.2, this.bounds);
      else return;
      e.preventDefault();
      e.stopPropagation();
      this.view = clampView(this.view, this.bounds);
      this.draw();
    });
  }

  private hover(x: number, y: number, clientX: number, clientY: number): void {
    if (y >= AXIS && y < TOP && this.lastCounters) {
      const c = this.lastCounters;
      const bin = Math.min(c.hbmGbps.length - 1, Math.max(0, Math.floor((x / this.width()) * c.hbmGbps.length)));
      const engines = Object.entries(c.engineBusy).map(([engine, busy]) => `${escapeHtml(engine)} ${(busy[bin] * 100).toFixed(0)}%`).join(', ');
      const at = xToTime(this.view, this.width(), x) / 1000;
      this.tooltip.innerHTML = `<b>at ${formatTime(at, c.binNs / 1000)}</b><div>HBM ${c.hbmGbps[bin].toFixed(1)} GB/s</div>` +
        `<div>engines busy: ${engines || 'none'}</div><div>DMA ${c.dmaBusyQueues[bin].toFixed(1)} of ${c.dmaQueues} queues busy</div>`;
      placeTooltip(this.tooltip, clientX, clientY);
      return;
    }
    const row = Math.floor((y - TOP) / ROW);
    const hit = hitTest(this.placed.filter((p) => p.row === row), x, 2);
    if (!hit) {
      this.tooltip.style.display = 'none';
      return;
    }
    const r = hit.record;
    const op = r.op >= 0 ? this.data.source_ops[r.op] ?? '?' : '(no source op)';
    this.tooltip.innerHTML = hit.count > 1
      ? `<b>${hit.count} instructions</b> (zoom in)`
      : `<b>${escapeHtml(r.opcode)}</b> · ${escapeHtml(op)}<div>start ${formatTime(r.start / 1000, 0.0001)}, ` +
        `${formatTime(r.dur / 1000, 0.0001)}</div><div>HBM ${formatBytes(r.hbm_read)} read, ${formatBytes(r.hbm_written)} ` +
        `written; on-chip ${formatBytes(r.onchip)}</div><div>${r.flops} FLOPs; semaphore wait ` +
        `${r.semaphore_wait.toFixed(1)} ns</div>`;
    placeTooltip(this.tooltip, clientX, clientY);
  }

  // Counter tracks over the view, two pixels a bin: HBM bandwidth (scaled to its peak in view), each
  // compute engine's busy share (0-100%, one line per engine in its colour) and DMA queues busy (of all).
  private drawCounters(ctx: CanvasRenderingContext2D, width: number): void {
    const bins = Math.max(1, Math.floor(width / 2));
    const c = counterTracks(this.data.rows, this.view.start, this.view.end, bins);
    this.lastCounters = c;
    const binPx = width / bins;
    const track = (index: number) => AXIS + index * COUNTER;
    COUNTERS.forEach((_, index) => {
      ctx.fillStyle = index % 2 ? '#fbfbfc' : '#f3f6fa';
      ctx.fillRect(0, track(index), width, COUNTER);
    });
    const area = (index: number, values: number[], max: number, colour: string) => {
      const base = track(index) + COUNTER - 2;
      const scale = max > 0 ? (COUNTER - 6) / max : 0;
      ctx.fillStyle = colour;
      ctx.beginPath();
      ctx.moveTo(0, base);
      values.forEach((v, b) => {
        ctx.lineTo(b * binPx, base - v * scale);
        ctx.lineTo((b + 1) * binPx, base - v * scale);
      });
      ctx.lineTo(width, base);
      ctx.closePath();
      ctx.fill();
    };
    const peakHbm = Math.max(0, ...c.hbmGbps);
    area(0, c.hbmGbps, peakHbm, 'rgba(37, 99, 235, 0.55)');
    area(2, c.dmaBusyQueues, Math.max(1, c.dmaQueues), 'rgba(194, 65, 12, 0.5)');
    for (const [engine, busy] of Object.entries(c.engineBusy)) {
      const base = track(1) + COUNTER - 2;
      ctx.strokeStyle = colorFor(engine);
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      busy.forEach((v, b) => {
        const y = base - v * (COUNTER - 6);
        if (b === 0) ctx.moveTo(0, y);
        ctx.lineTo((b + 0.5) * binPx, y);
      });
      ctx.stroke();
      ctx.lineWidth = 1;
    }
    ctx.fillStyle = '#374151';
    ctx.font = '10px system-ui, sans-serif';
    const note = (index: number, text: string) => ctx.fillText(text, width - ctx.measureText(text).width - 4, track(index) + 7);
    note(0, `peak ${peakHbm.toFixed(1)} GB/s`);
    note(1, '0-100%');
    note(2, `of ${c.dmaQueues}`);
  }

  private showSummary(range: Viewport): void {
    const rows = summarizeRange(this.data.rows, range.start, range.end);
    const body = rows
      .map((r) => `<tr><td>${escapeHtml(r.name)}</td><td>${r.activePercent.toFixed(1)}%</td><td>${r.instructions}</td>` +
        `<td>${formatBytes(r.hbmBytes)}</td><td>${formatBytes(r.onchipBytes)}</td><td>${r.flops}</td></tr>`)
      .join('');
    const resolution = (range.end - range.start) / 1000 / 1000;
    this.summary.innerHTML = `<b>Selection ${formatTime(range.start / 1000, resolution)} – ` +
      `${formatTime(range.end / 1000, resolution)} (${formatTime((range.end - range.start) / 1000, resolution)})</b><table class="grid">` +
      `<tr><th>Row</th><th>Active</th><th>Instructions</th><th>HBM bytes</th><th>On-chip bytes</th><th>FLOPs</th></tr>` +
      `${body}</table>`;
  }

  draw(): void {
    const dpr = window.devicePixelRatio || 1;
    const width = this.width();
    const height = TOP + this.data.rows.length * ROW + 4;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const ctx = this.canvas.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '10px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    const pixel = (this.view.end - this.view.start) / width;
    // A real axis (microseconds from the execution's start, base + offsets when zoomed in far).
    const us = { start: this.view.start / 1000, end: this.view.end / 1000 };
    const axis = ruler(us, Math.max(2, Math.floor(width / 110)));
    this.lastRuler = axis;
    ctx.fillStyle = '#f4f5f7';
    ctx.fillRect(0, 0, width, AXIS);
    ctx.strokeStyle = '#d9dde3';
    ctx.fillStyle = '#444';
    let labelsFrom = 4;
    if (axis.base) {
      const baseLabel = `${axis.base.label} +`;
      ctx.fillStyle = '#1d2733';
      ctx.fillText(baseLabel, 4, AXIS / 2);
      labelsFrom = ctx.measureText(baseLabel).width + 12;
      ctx.fillStyle = '#444';
    }
    for (const tick of axis.ticks) {
      const tx = timeToX(this.view, width, tick.time * 1000);
      ctx.beginPath();
      ctx.moveTo(tx + 0.5, AXIS - 5);
      ctx.lineTo(tx + 0.5, height);
      ctx.stroke();
      if (tx + 3 >= labelsFrom) ctx.fillText(tick.label, tx + 3, AXIS / 2);
    }
    this.drawCounters(ctx, width);
    this.placed = [];
    this.data.rows.forEach((row, index) => {
      const y = TOP + index * ROW;
      ctx.fillStyle = index % 2 ? '#f7f8fa' : '#fff';
      ctx.fillRect(0, y, width, ROW);
      const visible = row.records
        .filter((r) => r.start + r.dur >= this.view.start && r.start <= this.view.end)
        .sort((a, b) => a.start - b.start);
      for (const box of mergeSubPixel(visible, pixel)) {
        const x0 = timeToX(this.view, width, box.start);
        const x1 = Math.max(x0 + 1, timeToX(this.view, width, box.end));
        const r = box.first;
        ctx.fillStyle = box.count > 1 ? MERGED_COLOR : colorFor(colourKey(this.colourMode, r, row, this.data.source_ops));
        // A pixel of gap between neighbours keeps back-to-back instructions distinguishable.
        ctx.fillRect(x0, y + 2, x1 - x0 > 3 ? x1 - x0 - 1 : x1 - x0, ROW - 4);
        if (box.count === 1 && x1 - x0 > 40) {
          ctx.fillStyle = '#fff';
          ctx.fillText(fitText(ctx, r.opcode, x1 - x0 - 4), Math.max(0, x0) + 2, y + ROW / 2);
        }
        this.placed.push({ start: x0, end: x1, row: index, record: r, count: box.count });
      }
    });
    if (this.selection) {
      const x0 = timeToX(this.view, width, this.selection.start);
      const x1 = timeToX(this.view, width, this.selection.end);
      ctx.fillStyle = 'rgba(37, 99, 235, 0.15)';
      ctx.fillRect(x0, AXIS, x1 - x0, height - AXIS);
    }
    if (this.cursorX !== undefined && !this.drag) {
      ctx.strokeStyle = 'rgba(17, 24, 39, 0.55)';
      ctx.beginPath();
      ctx.moveTo(this.cursorX + 0.5, 0);
      ctx.lineTo(this.cursorX + 0.5, height);
      ctx.stroke();
      const label = formatTime(xToTime(this.view, width, this.cursorX) / 1000, pixel / 1000);
      const w = ctx.measureText(label).width + 8;
      const lx = Math.min(this.cursorX + 2, width - w);
      ctx.fillStyle = '#1d2733';
      ctx.fillRect(lx, 0, w, AXIS);
      ctx.fillStyle = '#fff';
      ctx.fillText(label, lx + 4, AXIS / 2);
    }
  }
}
