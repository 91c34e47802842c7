// The Explorer application: profile manager, system timeline with the dependency chain, device
// timeline and operator table. Routes live in the URL hash (see url.ts) so a view can be linked.

import { ApiError, api, type EventDetails, type EventSummary, type KeyAveragesAnswer, type ProfileEntry } from './api';
import { buildChain, deviceQueryOf, executionInChain, hasChain, type Chain, type ChainLink } from './chain';
import { DeviceView } from './device_view';
import { layerOf, type GroupingMode } from './lanes';
import { COLUMNS, nextSort, sortRows, type SortDirection, type SortKey } from './table';
import { formatDuration, type Viewport } from './timeline_math';
import { TimelineView, escapeHtml, type FlowArrow } from './timeline_view';
import { formatRoute, parseRoute, type Route } from './url';

const app = document.getElementById('app') as HTMLElement;
const errorBox = document.getElementById('error') as HTMLElement;
const tabs = document.getElementById('tabs') as HTMLElement;
const toolbar = document.getElementById('toolbar') as HTMLElement;
const title = document.getElementById('profile-title') as HTMLElement;
const searchInput = document.getElementById('search') as HTMLInputElement;
const searchStatus = document.getElementById('search-status') as HTMLElement;

interface Session {
  profile: string;
  timeline: TimelineView;
  details?: EventDetails;
  chain?: Chain;
  search?: { query: string; matches: EventSummary[]; index: number; total: number };
  keyAverages?: KeyAveragesAnswer;
  sort: { key: SortKey; direction: SortDirection };
  detailsPanel: HTMLElement;
  chainPanel: HTMLElement;
  devicePanel: HTMLElement;
  timelinePage: HTMLElement;
  operatorsPage: HTMLElement;
}

let session: Session | undefined;

// Test and debugging hook: the end-to-end test reads state and screen positions from here.
const hook = {
  get profile() { return session?.profile; },
  get selected() { return session?.details; },
  get chain() { return session?.chain; },
  boxOf: (id: number) => session?.timeline.boxOf(id),
  idle: Promise.resolve() as Promise<unknown>,
};
(window as unknown as { __explorer: typeof hook }).__explorer = hook;

function showError(error: unknown): void {
  const message = error instanceof ApiError || error instanceof Error ? error.message : String(error);
  errorBox.textContent = message;
  errorBox.hidden = false;
}

function clearError(): void {
  errorBox.hidden = true;
}

function track<T>(promise: Promise<T>): Promise<T | undefined> {
  const guarded = promise.catch((error: unknown) => {
    showError(error);
    return undefined;
  });
  hook.idle = guarded;
  return guarded;
}

// ---- Profile manager ------------------------------------------------------------------------------

async function showProfiles(): Promise<void> {
  session = undefined;
  tabs.hidden = true;
  toolbar.hidden = true;
  title.textContent = '';
  app.innerHTML = '<div class="profiles"><h2>Profiles</h2><p class="muted">Loading…</p></div>';
  const { profiles } = await api.profiles();
  const rows = profiles.map((p) => profileRow(p)).join('');
  app.innerHTML = `<div class="profiles"><h2>Profiles</h2>${profiles.length === 0
    ? '<p class="muted">No profile directories (with a manifest.json) under the served directory.</p>'
    : `<table class="grid" data-testid="profile-list"><tr><th>Name</th><th>Created (UTC)</th><th>Device</th>
       <th class="num">Framework</th><th class="num">Runtime</th><th class="num">Hardware</th>
       <th class="num">Instructions</th><th class="num">Dropped</th><th></th></tr>${rows}</table>`}</div>`;
  app.querySelectorAll<HTMLButtonElement>('button[data-delete]').forEach((button) =>
    button.addEventListener('click', () => {
      const name = button.dataset.delete ?? '';
      if (!confirm(`Delete profile '${name}' from disk?`)) return;
      void track(api.remove(name).then(() => showProfiles()));
    }));
}

function profileRow(p: ProfileEntry): string {
  const link = `<a href="${formatRoute({ profile: p.name })}" data-profile="${escapeHtml(p.name)}">${escapeHtml(p.name)}</a>`;
  const remove = `<button class="link" data-delete="${escapeHtml(p.name)}">delete</button>`;
  if (!p.ok || !p.manifest) {
    return `<tr><td>${escapeHtml(p.name)}</td><td colspan="7" class="muted">unreadable: ${escapeHtml(p.error ?? '')}</td>` +
      `<td>${remove}</td></tr>`;
  }
  const m = p.manifest;
  return `<tr><td>${link}</td><td>${escapeHtml(m.created_utc)}</td><td>${escapeHtml(m.device)} (${escapeHtml(m.core_version)})</td>` +
    `<td class="num">${m.events.framework}</td><td class="num">${m.events.runtime}</td><td class="num">${m.events.hardware}</td>` +
    `<td class="num">${m.events.instruction_records}</td><td class="num">${m.dropped}</td><td>${remove}</td></tr>`;
}

// ---- Profile view ---------------------------------------------------------------------------------

async function openProfile(route: Route): Promise<void> {
  const name = route.profile as string;
  const lanes = await api.lanes(name);
  app.innerHTML = '';
  tabs.hidden = false;
  toolbar.hidden = false;
  title.textContent = name;
  searchInput.value = '';
  searchStatus.textContent = '';
  const timelinePage = document.createElement('div');
  timelinePage.dataset.page = 'timeline';
  const operatorsPage = document.createElement('div');
  operatorsPage.dataset.page = 'operators';
  operatorsPage.hidden = true;
  const wrap = document.createElement('div');
  wrap.className = 'timeline-wrap';
  const panels = document.createElement('div');
  panels.className = 'panels';
  const detailsPanel = document.createElement('div');
  detailsPanel.className = 'panel details';
  detailsPanel.dataset.testid = 'details';
  detailsPanel.innerHTML = '<h3>Selection</h3><p class="muted">Click an event. W/S zoom, A/D pan, F zooms to the selection.</p>';
  const chainPanel = document.createElement('div');
  chainPanel.className = 'panel chain';
  chainPanel.dataset.testid = 'chain';
  chainPanel.innerHTML = '<h3>Dependency chain</h3><p class="muted">Select an event with a flow.</p>';
  panels.append(detailsPanel, chainPanel);
  const devicePanel = document.createElement('div');
  devicePanel.className = 'device';
  devicePanel.dataset.testid = 'device';
  devicePanel.hidden = true;
  timelinePage.append(wrap, panels, devicePanel);
  app.append(timelinePage, operatorsPage);

  const initial: Viewport | undefined =
    route.start !== undefined && route.end !== undefined ? { start: route.start, end: route.end } : undefined;
  const timeline = new TimelineView(wrap, name, lanes, {
    onSelect: (id) => void track(selectEvent(id)),
    onViewChange: () => scheduleRouteUpdate(),
  }, initial);
  session = {
    profile: name, timeline, sort: { key: 'self_device_us', direction: 'desc' },
    detailsPanel, chainPanel, devicePanel, timelinePage, operatorsPage,
  };
  (document.getElementById('grouping') as HTMLSelectElement).value = 'default';
  switchTab('timeline');
  if (route.selected !== undefined) await selectEvent(route.selected, initial === undefined);
}

let routeTimer: number | undefined;
function scheduleRouteUpdate(): void {
  window.clearTimeout(routeTimer);
  routeTimer = window.setTimeout(() => {
    if (!session) return;
    const view = session.timeline.view;
    const hash = formatRoute({ profile: session.profile, start: view.start, end: view.end, selected: session.details?.id });
    if (location.hash !== hash) history.replaceState(null, '', hash);
  }, 200);
}

async function selectEvent(id: number | undefined, reveal = true): Promise<void> {
  const current = session;
  if (!current) return;
  if (id === undefined) {
    current.details = undefined;
    current.chain = undefined;
    current.timeline.select(undefined);
    current.detailsPanel.innerHTML = '<h3>Selection</h3><p class="muted">Nothing selected.</p>';
    current.chainPanel.innerHTML = '<h3>Dependency chain</h3><p class="muted">Select an event with a flow.</p>';
    scheduleRouteUpdate();
    return;
  }
  const details = await api.event(current.profile, id);
  if (session !== current) return;
  current.details = details;
  renderDetails(current, details);
  current.timeline.select(details, [], reveal);
  scheduleRouteUpdate();
  if (!hasChain(details)) {
    current.chain = undefined;
    current.chainPanel.innerHTML = '<h3>Dependency chain</h3><p class="muted">This event has no flows.</p>';
    return;
  }
  const cache = new Map<number, Promise<EventDetails>>([[details.id, Promise.resolve(details)]]);
  const fetchEvent = (eventId: number) => {
    let found = cache.get(eventId);
    if (!found) {
      found = api.event(current.profile, eventId);
      cache.set(eventId, found);
    }
    return found;
  };
  const chain = await buildChain(details, fetchEvent);
  if (session !== current || current.details?.id !== id) return;
  current.chain = chain;
  current.timeline.select(details, chainArrows(chain), false);
  renderChain(current, chain);
}

function chainArrows(chain: Chain): FlowArrow[] {
  const ordered: ChainLink[] = [
    ...chain.upstream,
    { event: chain.selected, layer: layerOf(chain.selected.lane_name), via: 'selected' },
    ...chain.downstream.filter((l) => l.via !== 'launch'),
  ];
  const arrows: FlowArrow[] = [];
  for (let i = 1; i < ordered.length; i++) {
    const category = ordered[i].via === 'selected' ? ordered[i - 1].via : ordered[i].via;
    arrows.push({ from: ordered[i - 1].event, to: ordered[i].event, category });
  }
  return arrows;
}

function renderDetails(current: Session, details: EventDetails): void {
  const args = Object.entries(details.args)
    .map(([key, value]) => `<dt>${escapeHtml(key)}</dt><dd>${escapeHtml(JSON.stringify(value))}</dd>`)
    .join('');
  current.detailsPanel.innerHTML = `<h3>Selection</h3><dl>
    <dt>Name</dt><dd data-testid="selected-name">${escapeHtml(details.name)}</dd>
    <dt>Lane</dt><dd>${escapeHtml(details.lane_name)}</dd>
    <dt>Start</dt><dd>${formatDuration(details.ts)}</dd><dt>Duration</dt><dd>${formatDuration(details.dur)}</dd>
    <dt>Category</dt><dd>${escapeHtml(details.cat)}</dd>${args}</dl>`;
  if (details.name === 'nc_exec_running') {
    const button = document.createElement('button');
    button.textContent = 'Open device timeline';
    button.dataset.testid = 'open-device';
    button.addEventListener('click', () => void track(openDevice(current, details)));
    current.detailsPanel.querySelector('h3')?.after(button);
  }
}

function chainRow(link: ChainLink, current: boolean): string {
  return `<tr class="clickable${current ? ' current' : ''}" data-event="${link.event.id}">` +
    `<td><span class="layer ${link.layer}">${link.layer}</span></td><td>${escapeHtml(link.event.name)}</td>` +
    `<td>${escapeHtml(link.event.lane_name)}</td><td class="num">${formatDuration(link.event.ts)}</td>` +
    `<td class="num">${formatDuration(link.event.dur)}</td><td>${escapeHtml(link.via)}</td></tr>`;
}

function renderChain(current: Session, chain: Chain): void {
  const selectedLink: ChainLink = { event: chain.selected, layer: layerOf(chain.selected.lane_name), via: 'selected' };
  const path = [...chain.upstream, selectedLink, ...chain.downstream.filter((l) => l.via !== 'launch')];
  const header = '<tr><th>Layer</th><th>Event</th><th>Lane</th><th class="num">Start</th><th class="num">Duration</th><th>Via</th></tr>';
  const execution = executionInChain(chain);
  current.chainPanel.innerHTML = `<h3>Dependency chain</h3>
    <div class="chain-arrows">${path.map((l) => `<span class="layer ${l.layer}">${escapeHtml(l.event.name)}</span>`).join(' → ')}</div>
    <h3>Upstream</h3><table class="grid" data-testid="upstream">${header}${chain.upstream.map((l) => chainRow(l, false)).join('') ||
      '<tr><td colspan="6" class="muted">none</td></tr>'}${chainRow(selectedLink, true)}</table>
    <h3>Downstream</h3><table class="grid" data-testid="downstream">${header}${chain.downstream.map((l) => chainRow(l, false)).join('') ||
      '<tr><td colspan="6" class="muted">none</td></tr>'}</table>
    ${execution ? `<p><button data-testid="chain-open-device" data-event="${execution.id}">Open device timeline of ` +
      `${escapeHtml(execution.name)}</button></p>` : ''}`;
  current.chainPanel.querySelectorAll<HTMLTableRowElement>('tr[data-event]').forEach((row) =>
    row.addEventListener('click', () => void track(selectEvent(Number(row.dataset.event)))));
  current.chainPanel.querySelector<HTMLButtonElement>('button[data-testid="chain-open-device"]')?.addEventListener('click',
    (e) => {
      const id = Number((e.currentTarget as HTMLButtonElement).dataset.event);
      void track(api.event(current.profile, id).then((d) => openDevice(current, d)));
    });
}

async function openDevice(current: Session, execution: EventDetails): Promise<void> {
  const query = deviceQueryOf(execution);
  if (!query) throw new Error(`${execution.name} names no executable (no "neff" argument)`);
  const data = await api.device(current.profile, query.neff, query.core, query.seq);
  current.devicePanel.hidden = false;
  new DeviceView(current.devicePanel, data);
  current.devicePanel.scrollIntoView({ block: 'nearest' });
}

// ---- Operator table -------------------------------------------------------------------------------

async function showOperators(current: Session): Promise<void> {
  current.keyAverages ??= await api.keyAverages(current.profile);
  const data = current.keyAverages;
  const rows = sortRows(data.rows, current.sort.key, current.sort.direction);
  const arrow = (key: SortKey) => (current.sort.key === key ? (current.sort.direction === 'asc' ? ' ▲' : ' ▼') : '');
  const head = COLUMNS.map((c) => `<th class="sortable${c.numeric ? ' num' : ''}" data-key="${c.key}">${c.label}${arrow(c.key)}</th>`).join('');
  const body = rows.map((r) => `<tr class="clickable" data-name="${escapeHtml(r.name)}"><td>${escapeHtml(r.name)}</td>` +
    `<td class="num">${formatDuration(r.self_cpu_us)}</td><td class="num">${formatDuration(r.cpu_total_us)}</td>` +
    `<td class="num">${formatDuration(r.self_device_us)}</td><td class="num">${formatDuration(r.device_total_us)}</td>` +
    `<td class="num">${r.count}</td></tr>`).join('');
  current.operatorsPage.innerHTML = `<div class="profiles"><p class="muted">Key averages (${escapeHtml(data.source)}). ` +
    `Click a row to highlight its events on the timeline.</p><table class="grid" data-testid="operator-table"><tr>${head}</tr>` +
    `${body}</table><p>Self CPU time total: ${formatDuration(data.self_cpu_total_us)}<br>Self ${escapeHtml(data.device)} ` +
    `time total: ${formatDuration(data.self_device_total_us)}</p></div>`;
  current.operatorsPage.querySelectorAll<HTMLElement>('th[data-key]').forEach((th) =>
    th.addEventListener('click', () => {
      current.sort = nextSort(current.sort, th.dataset.key as SortKey);
      void track(showOperators(current));
    }));
  current.operatorsPage.querySelectorAll<HTMLElement>('tr[data-name]').forEach((tr) =>
    tr.addEventListener('click', () => {
      current.timeline.highlightNames([tr.dataset.name ?? '']);
      switchTab('timeline');
    }));
}

function switchTab(tab: 'timeline' | 'operators'): void {
  tabs.querySelectorAll<HTMLButtonElement>('button').forEach((b) => b.classList.toggle('active', b.dataset.tab === tab));
  if (!session) return;
  session.timelinePage.hidden = tab !== 'timeline';
  session.operatorsPage.hidden = tab !== 'operators';
  toolbar.hidden = tab !== 'timeline';
  if (tab === 'operators') void track(showOperators(session));
  else session.timeline.requestDraw();
}

// ---- Search ---------------------------------------------------------------------------------------

async function searchStep(direction: 1 | -1): Promise<void> {
  const current = session;
  const query = searchInput.value.trim();
  if (!current || !query) return;
  if (!current.search || current.search.query !== query) {
    const answer = await api.search(current.profile, query);
    current.search = { query, matches: answer.matches, total: answer.total, index: -1 };
  }
  const search = current.search;
  if (search.matches.length === 0) {
    searchStatus.textContent = 'no match';
    return;
  }
  search.index = (search.index + direction + search.matches.length) % search.matches.length;
  const more = search.total > search.matches.length ? ` (first ${search.matches.length} of ${search.total})` : '';
  searchStatus.textContent = `${search.index + 1} / ${search.matches.length}${more}`;
  await selectEvent(search.matches[search.index].id);
}

// ---- Wiring ---------------------------------------------------------------------------------------

async function route(): Promise<void> {
  clearError();
  const next = parseRoute(location.hash);
  if (!next.profile) {
    await showProfiles();
    return;
  }
  if (session?.profile === next.profile) return;
  await openProfile(next);
}

tabs.addEventListener('click', (e) => {
  const tab = (e.target as HTMLElement).dataset.tab;
  if (tab === 'timeline' || tab === 'operators') switchTab(tab);
});
(document.getElementById('grouping') as HTMLSelectElement).addEventListener('change', (e) =>
  session?.timeline.setGrouping((e.target as HTMLSelectElement).value as GroupingMode));
document.getElementById('fit')?.addEventListener('click', () => session?.timeline.fitAll());
document.getElementById('zoom-selection')?.addEventListener('click', () => session?.timeline.zoomToSelection());
document.getElementById('search-next')?.addEventListener('click', () => void track(searchStep(1)));
document.getElementById('search-prev')?.addEventListener('click', () => void track(searchStep(-1)));
searchInput.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') {
    e.preventDefault();
    void track(searchStep(e.shiftKey ? -1 : 1));
  }
});
document.addEventListener('keydown', (e) => {
  const target = e.target as HTMLElement;
  if (!session || ['INPUT', 'SELECT', 'TEXTAREA'].includes(target.tagName) || target.tagName === 'CANVAS' &&
      target.dataset.testid === 'device-timeline' || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === 'Escape') void track(selectEvent(undefined));
  else if (e.key.toLowerCase() === 'f') session.timeline.zoomToSelection();
  else if (session.timeline.handleKey(e)) e.preventDefault();
});
window.addEventListener('hashchange', () => void track(route()));
void track(route());
