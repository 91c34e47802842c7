// The Summary page of one profile: ranked insights with their evidence and fix, key metrics with
// units, per-engine active time as bars, MFU/MBU, the arithmetic intensity against the ridge point
// (docs/hardware-model.md §4.2, Summary Viewer), a merged profile's rows per rank and its straggler, and the
// collectives per core and rank when it ran some.

import type { SummaryAnswer } from './api';
import { escapeHtml } from './html';
import { formatDuration } from './timeline_math';
import {
  METRIC_GROUPS, engineBars, formatMetric, humanizeText, intensityVerdict, numberMetric, rankInsights,
} from './summary_data';
import type { MetricUnit } from './summary_data';

export function renderSummary(container: HTMLElement, summary: SummaryAnswer): void {
  const insights = rankInsights(summary.insights ?? []);
  const insightItems = insights.map((insight, index) => `<li class="insight" data-insight="${escapeHtml(insight.id)}">
      <div class="insight-head"><span class="rank">${index + 1}</span><b>${escapeHtml(humanizeText(insight.title))}</b>
        <span class="saving">could save ${formatDuration(insight.potential_saving_us)}</span></div>
      <div><span class="muted">Evidence:</span> ${escapeHtml(humanizeText(insight.evidence))}</div>
      <div><span class="muted">Fix:</span> ${escapeHtml(humanizeText(insight.fix))}</div></li>`).join('');

  const bars = engineBars(summary).map((bar) => `<div class="bar-row" data-engine="${bar.engine}">
      <span class="bar-label">${bar.label}</span>
      <span class="bar-track"><span class="bar-fill" style="width:${bar.percent.toFixed(2)}%"></span></span>
      <span class="bar-value">${formatMetric(bar.percent, 'percent')}${bar.activeUs !== undefined
        ? ` <span class="muted">(${formatDuration(bar.activeUs)})</span>` : ''}</span></div>`).join('');

  const utilization = ['mfu_estimated_percent', 'mbu_estimated_percent', 'hfu_estimated_percent']
    .map((key) => ({ key, value: numberMetric(summary, key) }))
    .filter((m) => m.value !== undefined)
    .map((m) => `<div class="gauge" data-metric="${m.key}"><div class="gauge-value">${formatMetric(m.value, 'percent')}</div>
      <div class="muted">${m.key.slice(0, 3).toUpperCase()}</div></div>`).join('');

  const verdict = intensityVerdict(summary);
  const groups = METRIC_GROUPS.map((group) => {
    const rows = group.metrics
      .filter((m) => summary[m.key] !== undefined)
      .map((m) => `<tr data-metric="${m.key}"><td>${escapeHtml(m.label)}</td>` +
        `<td class="num">${escapeHtml(formatMetric(summary[m.key], m.unit, m.key))}</td></tr>`)
      .join('');
    return rows ? `<div class="metric-group"><h3>${group.title}</h3><table class="grid">${rows}</table></div>` : '';
  }).join('');

  const cc = summary.collectives;
  const collectives = cc ? `<section data-testid="collectives"><h2>Collectives</h2>
      <p class="muted">${cc.collectives} collective(s) over ${cc.lanes.length} core(s) of ${cc.world_size} rank(s):
        active ${formatDuration(cc.active_us)} (cc_running), waiting for peers ${formatDuration(cc.wait_us)};
        bus bandwidth ${cc.bus_gbps.toFixed(1)} GB/s of the ${cc.link_gbps.toFixed(1)} GB/s link peak.</p>
      <table class="grid"><tr><th>Rank</th><th>Core</th><th>Collectives</th><th>Active</th><th>Wait</th><th>Busy</th>
        <th>Span</th><th>Last arrivals</th><th>Late</th></tr>${cc.lanes.map((l) => `<tr data-rank="${l.rank}" data-core="${l.core}">
        <td class="num">${l.rank}</td><td class="num">${l.core}</td><td class="num">${l.collectives}</td>
        <td class="num">${formatDuration(l.active_us)}</td><td class="num">${formatDuration(l.wait_us)}</td>
        <td class="num">${formatDuration(l.busy_us)}</td><td class="num">${formatDuration(l.span_us)}</td>
        <td class="num">${l.last_arrivals}</td><td class="num">${formatDuration(l.late_us)}</td></tr>`).join('')}</table></section>` : '';

  // A merged profile: the metrics above are every rank's together; one row per rank, and the straggler.
  const rankRows = summary.ranks ?? [];
  const straggler = summary.straggler;
  const rankColumns: { key: string; label: string; unit: MetricUnit }[] = [
    { key: 'executions', label: 'Executions', unit: 'count' },
    { key: 'total_time_us', label: 'Device time', unit: 'us' },
    { key: 'mfu_estimated_percent', label: 'MFU', unit: 'percent' },
    { key: 'mbu_estimated_percent', label: 'MBU', unit: 'percent' },
    { key: 'hbm_read_bytes', label: 'HBM read', unit: 'bytes' },
    { key: 'hbm_write_bytes', label: 'HBM written', unit: 'bytes' },
    { key: 'bound', label: 'Bound', unit: 'text' },
  ];
  const ranks = rankRows.length > 0 ? `<section data-testid="ranks"><h2>Ranks</h2>
      <p class="muted">The metrics below are the sum of ${rankRows.length} ranks' captured executions.${straggler
        ? (straggler.excess_us > 0
          ? ` <span data-testid="straggler" data-rank="${straggler.rank}">Straggler: rank ${straggler.rank}, ${
            formatDuration(straggler.excess_us)} more device time than rank ${straggler.fastest_rank}.</span>`
          : ' <span data-testid="straggler" data-rank="">No straggler: every rank ran the same device time.</span>')
        : ''}</p>
      <table class="grid"><tr><th>Rank</th>${rankColumns.map((c) => `<th>${c.label}</th>`).join('')}</tr>${rankRows
        .map((row) => `<tr data-rank="${row.rank}"><td class="num">${row.rank}</td>${rankColumns
          .map((c) => `<td class="num" data-metric="${c.key}">${escapeHtml(formatMetric(row[c.key], c.unit, c.key))}</td>`)
          .join('')}</tr>`).join('')}</table></section>` : '';

  container.innerHTML = `<div class="summary" data-testid="summary">
    <section><h2>Insights</h2>${insights.length > 0
      ? `<ol class="insights" data-testid="insights">${insightItems}</ol>`
      : '<p class="muted" data-testid="insights">No findings: nothing in this profile crossed an insight threshold.</p>'}</section>
    ${ranks}
    ${collectives}
    <section class="summary-columns">
      <div><h2>Engines</h2><p class="muted">Active time as a share of the device time.</p>
        <div class="bars" data-testid="engine-bars">${bars || '<p class="muted">No engine metrics.</p>'}</div>
        <div class="gauges">${utilization}</div>
        <h2>Arithmetic intensity</h2><p class="verdict ${verdict.bound}" data-testid="verdict">${escapeHtml(verdict.text)}</p></div>
      <div class="metric-groups">${groups}</div>
    </section></div>`;
}
