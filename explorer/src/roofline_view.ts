// The Roofline page: the chart of roofline.ts with a kind filter (executables, ops), a tooltip with
// each point's values on hover, and the points as a table. Clicking an op's point calls onPickOp (the
// application highlights that op's events on the system timeline).

import type { RooflineData, RooflinePoint } from './api';
import { escapeHtml } from './html';
import { KIND_COLORS, pointTitle, rooflineSvg } from './roofline';
import { formatSi } from './summary_data';
import { formatDuration } from './timeline_math';

export function renderRoofline(container: HTMLElement, roof: RooflineData, onPickOp?: (name: string) => void): void {
  const kinds = new Set<RooflinePoint['kind']>(['executable', 'op']);
  container.innerHTML = `<div class="roofline" data-testid="roofline">
    <p class="muted">Peak ${formatSi(roof.peak_flops_per_s, 'FLOP/s')}, HBM ${formatSi(roof.hbm_bytes_per_s, 'B/s')},
      ridge point ${Number(roof.ridge_point.toPrecision(3))} FLOP/B: left of it a point is memory-bound, right of it
      compute-bound. Circle area is device time within its kind. Click an op to highlight it on the timeline.</p>
    <div class="roofline-kinds">${(['executable', 'op'] as const).map((kind) => `<label><input type="checkbox"
      data-kind="${kind}" checked> <i style="background:${KIND_COLORS[kind]}"></i>${kind}s</label>`).join(' ')}</div>
    <div class="roofline-plot"><div class="chart"></div><div class="tooltip"></div></div>
    <table class="grid" data-testid="roofline-table"></table></div>`;
  const chart = container.querySelector('.chart') as HTMLElement;
  const tooltip = container.querySelector('.roofline-plot .tooltip') as HTMLElement;
  const table = container.querySelector('[data-testid="roofline-table"]') as HTMLElement;

  const draw = () => {
    const points = roof.points.filter((p) => kinds.has(p.kind));
    chart.innerHTML = rooflineSvg(roof, points);
    table.innerHTML = '<tr><th>Kind</th><th>Name</th><th class="num">Time</th><th class="num">Intensity</th>' +
      '<th class="num">Achieved</th><th class="num">Attainable</th><th class="num">Efficiency</th><th>Bound</th></tr>' +
      points.map((p) => `<tr><td>${p.kind}</td><td>${escapeHtml(p.name)}</td><td class="num">${formatDuration(p.time_us)}</td>` +
        `<td class="num">${Number(p.intensity.toPrecision(3))} FLOP/B</td>` +
        `<td class="num">${formatSi(p.achieved_flops_per_s, 'FLOP/s')}</td>` +
        `<td class="num">${formatSi(p.attainable_flops_per_s, 'FLOP/s')}</td>` +
        `<td class="num">${(100 * p.efficiency).toFixed(1)}%</td><td>${escapeHtml(p.bound)}</td></tr>`).join('');
    chart.querySelectorAll<SVGCircleElement>('circle.roofline-point').forEach((circle) => {
      const point = points[Number(circle.dataset.index)];
      circle.addEventListener('mouseenter', () => {
        tooltip.textContent = pointTitle(point);
        tooltip.style.display = 'block';
      });
      circle.addEventListener('mousemove', (e) => {
        const rect = chart.getBoundingClientRect();
        tooltip.style.left = `${e.clientX - rect.left + 14}px`;
        tooltip.style.top = `${e.clientY - rect.top + 10}px`;
      });
      circle.addEventListener('mouseleave', () => (tooltip.style.display = 'none'));
      if (point.kind === 'op' && onPickOp) {
        circle.classList.add('pickable');
        circle.addEventListener('click', () => onPickOp(point.name));
      }
    });
  };
  container.querySelectorAll<HTMLInputElement>('input[data-kind]').forEach((input) =>
    input.addEventListener('change', () => {
      const kind = input.dataset.kind as RooflinePoint['kind'];
      if (input.checked) kinds.add(kind);
      else kinds.delete(kind);
      draw();
    }));
  draw();
}
