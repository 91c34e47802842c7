// The device timeline of one execution: one row per engine (Tensor, Vector, Scalar, GpSimd) and per DMA
// queue, instructions coloured by the framework op they come from. Wheel zooms, drag pans, Shift+drag
// selects a range and summarises it per row.

import type { DeviceAnswer, DeviceRecord } from './api';
import { MERGED_COLOR, colorFor } from './colors';
import { formatBytes, summarizeRange } from './device_summary';
import { hitTest, mergeSubPixel } from './merge';
import { clampView, fit, pan, timeToX, xToTime, zoom, type Viewport } from './timeline_math';
import { escapeHtml, fitText } from './timeline_view';

const ROW = 22;
const AXIS = 20;

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
    this.tooltip.className = 'tooltip';
    plot.append(this.canvas, this.tooltip);
    body.append(labels, plot);
    const legend = document.createElement('div');
    legend.className = 'legend';
    for (const op of data.source_ops) {
      legend.insertAdjacentHTML('beforeend', `<span><i style="background:${colorFor(op)}"></i>${escapeHtml(op)}</span>`);
    }
    this.summary.className = 'device-summary';
    this.summary.textContent = 'Shift+drag to summarise a range; wheel zooms, drag pans.';
    container.append(header, legend, body, this.summary);
    this.attachInput();
    new ResizeObserver(() => this.draw()).observe(plot);
    this.draw();
  }

  private width(): number {
    return Math.max(100, (this.canvas.parentElement?.clientWidth ?? 600) - 4);
  }

  private attachInput(): void {
    this.canvas.addEventListener('wheel', (e) => {
      e.preventDefault();
      const anchor = xToTime(this.view, this.width(), e.offsetX);
      this.view = zoom(this.view, Math.exp(e.deltaY * 0.002), anchor, this.bounds);
      this.draw();
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
      this.hover(e.offsetX, e.offsetY);
    });
    this.canvas.addEventListener('mouseleave', () => (this.tooltip.style.display = 'none'));
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

  private hover(x: number, y: number): void {
    const row = Math.floor((y - AXIS) / ROW);
    const hit = hitTest(this.placed.filter((p) => p.row === row), x, 2);
    if (!hit) {
      this.tooltip.style.display = 'none';
      return;
    }
    const r = hit.record;
    const op = r.op >= 0 ? this.data.source_ops[r.op] ?? '?' : '(no source op)';
    this.tooltip.innerHTML = hit.count > 1
      ? `<b>${hit.count} instructions</b> (zoom in)`
      : `<b>${escapeHtml(r.opcode)}</b> · ${escapeHtml(op)}<div>start ${r.start.toFixed(1)} ns, ` +
        `${r.dur.toFixed(1)} ns</div><div>HBM ${formatBytes(r.hbm_read)} read, ${formatBytes(r.hbm_written)} ` +
        `written; on-chip ${formatBytes(r.onchip)}</div><div>${r.flops} FLOPs; semaphore wait ` +
        `${r.semaphore_wait.toFixed(1)} ns</div>`;
    this.tooltip.style.display = 'block';
    this.tooltip.style.left = `${x + 14}px`;
    this.tooltip.style.top = `${y + 8}px`;
  }

  private showSummary(range: Viewport): void {
    const rows = summarizeRange(this.data.rows, range.start, range.end);
    const body = rows
      .map((r) => `<tr><td>${escapeHtml(r.name)}</td><td>${r.activePercent.toFixed(1)}%</td><td>${r.instructions}</td>` +
        `<td>${formatBytes(r.hbmBytes)}</td><td>${formatBytes(r.onchipBytes)}</td><td>${r.flops}</td></tr>`)
      .join('');
    this.summary.innerHTML = `<b>Selection ${range.start.toFixed(1)}–${range.end.toFixed(1)} ns</b><table class="grid">` +
      `<tr><th>Row</th><th>Active</th><th>Instructions</th><th>HBM bytes</th><th>On-chip bytes</th><th>FLOPs</th></tr>` +
      `${body}</table>`;
  }

  draw(): void {
    const dpr = window.devicePixelRatio || 1;
    const width = this.width();
    const height = AXIS + this.data.rows.length * ROW + 4;
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
    ctx.fillStyle = '#444';
    ctx.fillText(`${this.view.start.toFixed(1)} ns`, 4, AXIS / 2);
    const endLabel = `${this.view.end.toFixed(1)} ns`;
    ctx.fillText(endLabel, width - ctx.measureText(endLabel).width - 4, AXIS / 2);
    const pixel = (this.view.end - this.view.start) / width;
    this.placed = [];
    this.data.rows.forEach((row, index) => {
      const y = AXIS + index * ROW;
      ctx.fillStyle = index % 2 ? '#f7f8fa' : '#fff';
      ctx.fillRect(0, y, width, ROW);
      const visible = row.records
        .filter((r) => r.start + r.dur >= this.view.start && r.start <= this.view.end)
        .sort((a, b) => a.start - b.start);
      for (const box of mergeSubPixel(visible, pixel)) {
        const x0 = timeToX(this.view, width, box.start);
        const x1 = Math.max(x0 + 1, timeToX(this.view, width, box.end));
        const r = box.first;
        ctx.fillStyle = box.count > 1 ? MERGED_COLOR : colorFor(r.op >= 0 ? this.data.source_ops[r.op] ?? '' : r.opcode);
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
  }
}
