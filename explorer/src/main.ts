// The Explorer application: profile manager with upload, system timeline with the dependency chain,
// device timeline, operator table, summary, roofline and the comparison of two profiles. Routes live
// in the URL hash (see url.ts) so a view can be linked.

import {
  ApiError, api, type EventDetails, type EventSummary, type KeyAveragesAnswer, type LanesAnswer, type ProfileEntry,
  type KeyAverageRow, type SummaryAnswer,
} from './api';
import { buildChain, chainRows, deviceQueryOf, executionInChain, hasChain, type Chain, type ChainLink } from './chain';
import { CompareView } from './compare_view';
import { DeviceView } from './device_view';
import { formatBytes } from './device_summary';
import { frameLog } from './frames';
import { INDEX_COMPLETE_MARK, indexingText, shiftView } from './indexing';
import { layerOf, type GroupingMode } from './lanes';
import { argsHtml } from './event_args';
import { renderRoofline } from './roofline_view';
import { renderSummary } from './summary_view';
import { cellValue, nextSort, sortRows, type SortDirection, type SortKey } from './table';
import { activityView, formatDuration, pan, type AreaRow, type Viewport } from './timeline_math';
import { TimelineView, escapeHtml, type FlowArrow } from './timeline_view';
import {
  planDirectoryUpload, planPairUpload, profileNameError, progressText, type UploadPlan,
} from './upload';
import { TABS, formatRoute, parseRoute, type Route, type Tab } from './url';
import { VirtualRows } from './virtual_rows';

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
  // Matches are fetched a page at a time: `pages` maps a page's first index to its matches.
  search?: { query: string; pages: Map<number, EventSummary[]>; index: number; total: number; partial: boolean };
  // While the server has indexed only the first part of the trace: the indicator and the lanes answer
  // the view was opened on (its origin).
  indexing?: { indicator: HTMLElement; lanes: LanesAnswer };
  keyAverages?: KeyAveragesAnswer;
  operatorRows?: VirtualRows<KeyAverageRow>;
  operatorNumeric?: boolean[];  // per column: every cell a number (right-aligned)
  summary?: Promise<SummaryAnswer>;
  sort: { key: SortKey; direction: SortDirection };
  tab: Tab;
  detailsPanel: HTMLElement;
  chainPanel: HTMLElement;
  devicePanel: HTMLElement;
  device?: DeviceView;
  pages: Record<Tab, HTMLElement>;
}

let session: Session | undefined;
let openings = 0; // views entered so far: a profile still opening when another view is entered stops
let comparison: CompareView | undefined;

// Test and debugging hook: the end-to-end test reads state and screen positions from here.
const hook = {
  get profile() { return session?.profile; },
  get selected() { return session?.details; },
  get chain() { return session?.chain; },
  boxOf: (id: number) => session?.timeline.boxOf(id),
  get view() { return session?.timeline.view; },
  get bounds() { return session?.timeline.bounds; },
  get tab() { return session?.tab; },
  get drawnLanes() { return session?.timeline.drawnLanes; },
  get ruler() { return session?.timeline.lastRuler; },
  arrows: () => session?.timeline.arrows.map((a) => `${a.from.name}#${a.from.id} -${a.category}-> ${a.to.name}#${a.to.id}`).sort(),
  get operatorRows() { return session?.operatorRows ? { count: session.operatorRows.count, ...session.operatorRows.rendered } : undefined; },
  get deviceRuler() { return session?.device?.lastRuler; },
  get deviceCounters() {
    const c = session?.device?.lastCounters;
    return c && { bins: c.hbmGbps.length, peakHbmGbps: Math.max(...c.hbmGbps), dmaQueues: c.dmaQueues,
      peakDmaBusy: Math.max(...c.dmaBusyQueues), engines: Object.keys(c.engineBusy),
      peakEngineBusy: Math.max(...Object.values(c.engineBusy).flat()) };
  },
  get measure() { return session?.timeline.measure; },
  get mark() { return session?.timeline.mark; },
  // Matches asked of the server per search request (tests page with a small one).
  searchPage: 200,
  get compare() { return comparison; },
  // Benchmark hooks (bench/explorer/frame_bench.mjs): the frame log and a programmatic pan of the
  // system timeline by a fraction of the visible span.
  frames: () => frameLog.frames(),
  firstCompleteFrame: () => frameLog.firstComplete,
  // The open profile is shown from the server's partial index (the first view of a large trace).
  get partial() { return session?.indexing !== undefined; },
  indexComplete: () => performance.getEntriesByName(INDEX_COMPLETE_MARK).at(-1)?.startTime,
  panBy: (fraction: number) => {
    if (session) session.timeline.setView(pan(session.timeline.view, fraction, session.timeline.bounds));
  },
  // Shows `fraction` of the profile's span around its middle.
  zoomTo: (fraction: number) => {
    if (!session) return;
    const { start, end } = session.timeline.bounds;
    const middle = (start + end) / 2;
    const half = ((end - start) * fraction) / 2;
    session.timeline.setView({ start: middle - half, end: middle + half });
  },
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

function leaveViews(): void {
  openings++; // a profile still opening does not show over what comes next
  session = undefined;
  comparison = undefined;
  tabs.hidden = true;
  toolbar.hidden = true;
  title.textContent = '';
}

async function showProfiles(): Promise<void> {
  leaveViews();
  app.innerHTML = '<div class="profiles"><h2>Profiles</h2><p class="muted">Loading…</p></div>';
  const { profiles } = await api.profiles();
  const rows = profiles.map((p) => profileRow(p)).join('');
  app.innerHTML = `<div class="profiles"><h2>Profiles</h2>${profiles.length === 0
    ? '<p class="muted" data-testid="profile-list">No profile directories (with a manifest.json) under the served directory.</p>'
    : `<table class="grid" data-testid="profile-list"><tr><th>Name</th><th>Created (UTC)</th><th>Device</th>
       <th class="num">Framework</th><th class="num">Runtime</th><th class="num">Hardware</th>
       <th class="num">Instructions</th><th class="num">Dropped</th><th>Host clock</th><th></th></tr>${rows}</table>`}
    ${UPLOAD_FORM}</div>`;
  app.querySelectorAll<HTMLButtonElement>('button[data-delete]').forEach((button) =>
    button.addEventListener('click', () => {
      const name = button.dataset.delete ?? '';
      if (!confirm(`Delete profile '${name}' from disk?`)) return;
      void track(api.remove(name).then(() => showProfiles()));
    }));
  attachUpload(app.querySelector('[data-testid="upload"]') as HTMLElement);
}

const UPLOAD_FORM = `<section class="upload" data-testid="upload"><h3>Upload a profile</h3>
  <p class="muted">Either a whole profile output directory (the folder with manifest.json) or one executable and its
    instruction trace (a .neff and its .ntff).</p>
  <div class="upload-row"><label>Profile directory <input type="file" webkitdirectory multiple
    data-testid="upload-directory"></label>
    <label>Executable + trace <input type="file" multiple accept=".neff,.ntff" data-testid="upload-pair"></label></div>
  <div class="upload-row"><label>Name <input type="text" data-testid="upload-name" maxlength="200"
    placeholder="letters, digits, -_.+@"></label>
    <button data-testid="upload-submit" disabled>Upload</button>
    <progress data-testid="upload-progress" max="1" value="0" hidden></progress>
    <span data-testid="upload-status" class="upload-status"></span></div></section>`;

function attachUpload(form: HTMLElement): void {
  const directoryInput = form.querySelector('[data-testid="upload-directory"]') as HTMLInputElement;
  const pairInput = form.querySelector('[data-testid="upload-pair"]') as HTMLInputElement;
  const nameInput = form.querySelector('[data-testid="upload-name"]') as HTMLInputElement;
  const submit = form.querySelector('[data-testid="upload-submit"]') as HTMLButtonElement;
  const progress = form.querySelector('[data-testid="upload-progress"]') as HTMLProgressElement;
  const status = form.querySelector('[data-testid="upload-status"]') as HTMLElement;
  let plan: UploadPlan<File> | undefined;
  let suggested = '';
  const setStatus = (text: string, error = false) => {
    status.textContent = text;
    status.classList.toggle('error', error);
  };
  const picked = (input: HTMLInputElement, other: HTMLInputElement, planOf: (files: File[]) => UploadPlan<File>) => {
    other.value = '';
    plan = planOf([...(input.files ?? [])]);
    submit.disabled = !plan.ok;
    if (!plan.ok) {
      setStatus(plan.error, true);
      return;
    }
    if (nameInput.value === '' || nameInput.value === suggested) nameInput.value = plan.suggestedName;
    suggested = plan.suggestedName;
    setStatus(`${plan.files.length} file(s), ${formatBytes(plan.bytes)} ready to upload`);
  };
  directoryInput.addEventListener('change', () => picked(directoryInput, pairInput, planDirectoryUpload));
  pairInput.addEventListener('change', () => picked(pairInput, directoryInput, planPairUpload));
  submit.addEventListener('click', () => {
    if (!plan?.ok) return;
    const name = nameInput.value.trim();
    const nameError = profileNameError(name);
    if (nameError) {
      setStatus(nameError, true);
      return;
    }
    submit.disabled = true;
    progress.hidden = false;
    progress.value = 0;
    setStatus('Uploading…');
    const upload = api.upload(name, plan.files, (sent, total) => {
      progress.value = total > 0 ? sent / total : 0;
      setStatus(`Uploading ${progressText(sent, total, formatBytes)}`);
    }).then(async (answer) => {
      await showProfiles();
      const fresh = app.querySelector('[data-testid="upload-status"]') as HTMLElement;
      fresh.textContent = `Uploaded '${answer.uploaded}': ${answer.files} file(s), ${formatBytes(answer.bytes)}.`;
    }, (error: unknown) => {
      progress.hidden = true;
      submit.disabled = false;
      setStatus(`Upload failed: ${error instanceof Error ? error.message : String(error)}`, true);
    });
    hook.idle = upload;
  });
}

function profileRow(p: ProfileEntry): string {
  const link = `<a href="${formatRoute({ profile: p.name })}" data-profile="${escapeHtml(p.name)}">${escapeHtml(p.name)}</a>`;
  const remove = `<button class="link" data-delete="${escapeHtml(p.name)}">delete</button>`;
  if (!p.ok || !p.manifest) {
    return `<tr><td>${escapeHtml(p.name)}</td><td colspan="8" class="muted">unreadable: ${escapeHtml(p.error ?? '')}</td>` +
      `<td>${remove}</td></tr>`;
  }
  const m = p.manifest;
  return `<tr><td>${link}</td><td>${escapeHtml(m.created_utc)}</td><td>${escapeHtml(m.device)} (${escapeHtml(m.core_version)})</td>` +
    `<td class="num">${m.events.framework}</td><td class="num">${m.events.runtime}</td><td class="num">${m.events.hardware}</td>` +
    `<td class="num">${m.events.instruction_records}</td><td class="num">${m.dropped}</td><td>${clockCell(m.timing)}</td>` +
    `<td>${remove}</td></tr>`;
}

// The clock the profile's times come from; the simulator's wall time is shown as what it is, a measured
// figure apart from every time in the profile.
function clockCell(timing: NonNullable<ProfileEntry['manifest']>['timing']): string {
  if (!timing) return '<span class="muted">unknown</span>';
  const wall = timing.simulation_wall_ns >= 1e9 ? `${(timing.simulation_wall_ns / 1e9).toFixed(2)} s`
    : `${(timing.simulation_wall_ns / 1e6).toFixed(1)} ms`;
  const simulated = `simulated in ${wall} of wall time (measured, not part of any time shown)`;
  const notes = [timing.functional ? '' : 'timing only', timing.left_out > 0 ? `${timing.left_out} left out` : '']
    .filter((s) => s !== '').join(', ');
  return `<span title="${escapeHtml(simulated)}" data-testid="host-clock">${escapeHtml(timing.host_clock)}` +
    `${notes ? ` (${escapeHtml(notes)})` : ''}</span>`;
}

// ---- Profile view ---------------------------------------------------------------------------------

async function openProfile(route: Route): Promise<void> {
  const name = route.profile as string;
  leaveViews();
  // The first open of a large profile indexes it on the server: say so instead of a blank page.
  app.innerHTML = `<p class="muted profiles" data-testid="opening">Opening ${escapeHtml(name)}… (the first open ` +
    'indexes the profile)</p>';
  const generation = ++openings;
  const lanes = await api.lanes(name);
  const activity = await firstActivity(name, lanes);
  const initial: Viewport | undefined =
    route.start !== undefined && route.end !== undefined ? { start: route.start, end: route.end } : activity.view;
  if (generation !== openings) return; // a later navigation took over meanwhile
  app.innerHTML = '';
  tabs.hidden = false;
  toolbar.hidden = false;
  title.textContent = name;
  searchInput.value = '';
  searchStatus.textContent = '';
  const page = (tab: Tab) => {
    const element = document.createElement('div');
    element.dataset.page = tab;
    element.hidden = tab !== 'timeline';
    return element;
  };
  const pages: Record<Tab, HTMLElement> = {
    timeline: page('timeline'), operators: page('operators'), summary: page('summary'), roofline: page('roofline'),
  };
  const timelinePage = pages.timeline;
  const wrap = document.createElement('div');
  wrap.className = 'timeline-wrap';
  const panels = document.createElement('div');
  panels.className = 'panels';
  const detailsPanel = document.createElement('div');
  detailsPanel.className = 'panel details';
  detailsPanel.dataset.testid = 'details';
  detailsPanel.innerHTML = '<h3>Selection</h3><p class="muted">Click an event. W/S zoom, A/D pan, F zooms to the selection, 0 fits all, ? lists the keys.</p>';
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
  app.append(...TABS.map((tab) => pages[tab]));

  const timeline = new TimelineView(wrap, name, lanes, {
    onSelect: (id) => void track(selectEvent(id, false)), // clicked: already on screen
    onViewChange: () => scheduleRouteUpdate(),
    onMeasure: (range, rows) => {
      if (session?.timeline === timeline) renderArea(session, range, rows);
    },
  }, { initial });
  session = {
    profile: name, timeline, sort: { key: -1, direction: 'desc' }, tab: 'timeline',
    detailsPanel, chainPanel, devicePanel, pages,
  };
  (document.getElementById('grouping') as HTMLSelectElement).value = 'default';
  switchTab(route.tab ?? 'timeline', false);
  if (lanes.complete === false) watchIndexing(session, lanes, generation);
  if (route.selected !== undefined) await selectEvent(route.selected, route.start === undefined);
  else if (activity.executions.length === 1 && lanes.lanes.every((l) => layerOf(l) === 'hardware')) {
    // An uploaded executable + trace pair: one execution and nothing around it; what there is to see
    // is its device timeline.
    await selectEvent(activity.executions[0].id, false);
    const current = session as Session | undefined;
    if (current?.details?.id === activity.executions[0].id) await openDevice(current, current.details);
  }
}

// A profile opened on the server's partial index: a progress indicator above the pages, the lanes asked
// again every half second, and once the answer is complete the profile opened again on the same view,
// selection and tab, now from the complete index.
function watchIndexing(current: Session, opened: LanesAnswer, generation: number): void {
  const indicator = document.createElement('div');
  indicator.className = 'indexing';
  indicator.dataset.testid = 'indexing';
  indicator.innerHTML = '<progress max="1"></progress> <span class="muted"></span>';
  const show = (lanes: LanesAnswer) => {
    (indicator.querySelector('progress') as HTMLProgressElement).value = lanes.progress?.fraction ?? 0;
    (indicator.querySelector('span') as HTMLElement).textContent = indexingText(lanes.progress);
  };
  show(opened);
  app.prepend(indicator);
  current.indexing = { indicator, lanes: opened };
  const poll = async (): Promise<void> => {
    for (;;) {
      await new Promise((resolve) => window.setTimeout(resolve, 500));
      if (generation !== openings || session !== current) return;
      const lanes = await api.lanes(current.profile);
      if (generation !== openings || session !== current) return;
      if (lanes.complete === false) {
        show(lanes);
        continue;
      }
      const view = shiftView(current.timeline.view, opened.origin_us, lanes.origin_us);
      await openProfile({ profile: current.profile, start: view.start, end: view.end, selected: current.details?.id,
        tab: current.tab });
      performance.mark(INDEX_COMPLETE_MARK);
      return;
    }
  };
  // Not tracked (hook.idle): it runs as long as the indexing does. A failed index (a trace damaged past
  // its first part) is the server's error, shown as it is, and the indicator goes.
  poll().catch((error: unknown) => {
    indicator.remove();
    showError(error);
  });
}

// The view a profile opens on (see activityView): its device executions, from the op that launched the
// first of them. The first page of executions is enough: a long profile opens on its first busy stretch.
// Also gives those executions.
async function firstActivity(name: string, lanes: LanesAnswer):
    Promise<{ view?: Viewport; executions: EventSummary[] }> {
  const bounds = { start: lanes.start, end: lanes.end };
  let executions: EventSummary[];
  try {
    executions = (await api.search(name, 'nc_exec_running')).matches.filter((e) => e.name === 'nc_exec_running');
  } catch {
    return { executions: [] }; // the whole profile, as without executions
  }
  if (executions.length === 0) return { executions };
  const activity = executions.map((e) => ({ start: e.ts, end: e.ts + e.dur }));
  let cause: EventDetails | undefined = await api.event(name, executions[0].id).catch(() => undefined);
  for (let step = 0; cause && cause.flows_in.length > 0 && step < 4; step++) {
    const source: EventSummary = cause.flows_in[0].event;
    activity.push({ start: source.ts, end: source.ts + source.dur });
    if (layerOf(source) === 'framework') break; // the op: nothing launches it (one request fewer)
    cause = await api.event(name, source.id).catch(() => undefined);
  }
  return { view: activityView(activity, bounds), executions };
}

let routeTimer: number | undefined;
function scheduleRouteUpdate(): void {
  window.clearTimeout(routeTimer);
  routeTimer = window.setTimeout(() => {
    if (!session) return;
    const hash = currentHash(session);
    if (location.hash !== hash) history.replaceState(null, '', hash);
  }, 200);
}

function currentHash(current: Session): string {
  const view = current.timeline.view;
  return formatRoute({ profile: current.profile, start: view.start, end: view.end, selected: current.details?.id, tab: current.tab });
}

// Selections so far: an answer for one that a later selection overtook is dropped (answers can come
// back out of order).
let selections = 0;

async function selectEvent(id: number | undefined, reveal = true): Promise<void> {
  const current = session;
  if (!current) return;
  const selection = ++selections;
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
  if (session !== current || selection !== selections) return;
  current.details = details;
  renderDetails(current, details);
  current.timeline.select(details, [], reveal); // reveal: zooms in when the event is too narrow to see
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
  if (session !== current || selection !== selections) return;
  current.chain = chain;
  current.timeline.select(details, chainArrows(chain), false);
  renderChain(current, chain);
}

// The arrows are the tree's flows, nothing else: the same set whichever event of the tree is selected.
function chainArrows(chain: Chain): FlowArrow[] {
  return chain.edges.filter((e) => e.category !== 'launch').map((e) => ({ from: e.from, to: e.to, category: e.category }));
}

// The area selection (a measured range): what it covers, by name, in the details panel; the
// selection's details come back when it is cleared (Esc).
function renderArea(current: Session, range: Viewport | undefined, rows: AreaRow[]): void {
  if (!range) {
    if (current.details) renderDetails(current, current.details);
    else current.detailsPanel.innerHTML = '<h3>Selection</h3><p class="muted">Nothing selected.</p>';
    return;
  }
  const start = current.timeline.bounds.start;
  const body = rows.slice(0, 200).map((r) => `<tr><td>${escapeHtml(r.name)}</td><td class="num">${r.count}</td>` +
    `<td class="num">${formatDuration(r.durationUs)}</td></tr>`).join('');
  current.detailsPanel.innerHTML = `<h3>Area ${formatDuration(range.start - start)} → ${formatDuration(range.end - start)}` +
    ` (${formatDuration(range.end - range.start)})</h3><table class="grid" data-testid="area-summary"><tr><th>Name</th>` +
    `<th class="num">Events</th><th class="num">Time inside</th></tr>${body || '<tr><td colspan="3" class="muted">no events</td></tr>'}` +
    `</table><p class="muted">Esc clears the area.</p>`;
}

function renderDetails(current: Session, details: EventDetails): void {
  const args = argsHtml(details.args);
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
  const selectedLink: ChainLink = { event: chain.selected, layer: layerOf(chain.selected), via: 'selected' };
  const tree = chainRows(chain).map(({ link, depth }) =>
    `<div class="tree-row${link.event.id === chain.selected.id ? ' current' : ''}" data-event="${link.event.id}" ` +
    `style="padding-left:${depth * 18}px">${depth > 0 ? `<span class="via">${escapeHtml(link.via)} →</span> ` : ''}` +
    `<span class="layer ${link.layer}">${escapeHtml(link.event.name)}</span></div>`).join('');
  const header = '<tr><th>Layer</th><th>Event</th><th>Lane</th><th class="num">Start</th><th class="num">Duration</th><th>Via</th></tr>';
  const execution = executionInChain(chain);
  current.chainPanel.innerHTML = `<h3>Dependency chain</h3>
    <div class="chain-tree" data-testid="chain-tree">${tree}</div>
    <h3>Upstream</h3><table class="grid" data-testid="upstream">${header}${chain.upstream.map((l) => chainRow(l, false)).join('') ||
      '<tr><td colspan="6" class="muted">none</td></tr>'}${chainRow(selectedLink, true)}</table>
    <h3>Downstream</h3><table class="grid" data-testid="downstream">${header}${chain.downstream.map((l) => chainRow(l, false)).join('') ||
      '<tr><td colspan="6" class="muted">none</td></tr>'}</table>
    ${execution ? `<p><button data-testid="chain-open-device" data-event="${execution.id}">Open device timeline of ` +
      `${escapeHtml(execution.name)}</button></p>` : ''}`;
  current.chainPanel.querySelectorAll<HTMLElement>('tr[data-event], .tree-row[data-event]').forEach((row) =>
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
  current.device = new DeviceView(current.devicePanel, data);
  current.devicePanel.scrollIntoView({ block: 'nearest' });
}

// ---- Operator table -------------------------------------------------------------------------------

// Virtualized (VirtualRows): only the rows in view are in the DOM, so a table of thousands of rows shows
// and re-sorts at once; one click listener serves every row.
async function showOperators(current: Session): Promise<void> {
  const page = current.pages.operators;
  if (!current.keyAverages) {
    const answer = api.keyAverages(current.profile);
    if (page.childElementCount === 0 || page.querySelector('p.error')) showLoading(page, 'the operator table', answer);
    current.keyAverages = await answer;
  }
  if (session !== current) return;
  const data = current.keyAverages;
  if (!current.operatorRows) {
    // The cells are `sightline table`'s text, byte for byte (the server formats them with the profiler's
    // table code); the footer is the table's own.
    const numeric = data.headers.map((_, c) => c > 0 && data.rows.every((r) => typeof cellValue(r.cells[c] ?? '') === 'number'));
    page.innerHTML = `<div class="profiles"><p class="muted">Key averages (${escapeHtml(data.source)}), ` +
      `${data.rows.length.toLocaleString('en-US')} rows. Click a row to highlight its events on the timeline.</p>` +
      `<div class="vtable" data-testid="operator-scroll"><table class="grid" data-testid="operator-table"><thead><tr></tr></thead>` +
      `<tbody></tbody></table></div><p data-testid="operator-footer">${data.footer.map(escapeHtml).join('<br>')}</p></div>`;
    const scroller = page.querySelector('[data-testid="operator-scroll"]') as HTMLElement;
    const body = page.querySelector('[data-testid="operator-table"] tbody') as HTMLTableSectionElement;
    current.operatorNumeric = numeric;
    current.operatorRows = new VirtualRows(scroller, body, data.headers.length, (r) =>
      `<tr class="clickable" data-name="${escapeHtml(r.name)}" title="${escapeHtml(r.name)}">` +
      r.cells.map((cell, c) => `<td${numeric[c] ? ' class="num"' : ''}>${escapeHtml(cell)}</td>`).join('') + '</tr>');
    page.querySelector('[data-testid="operator-table"] thead')?.addEventListener('click', (e) => {
      const th = (e.target as HTMLElement).closest<HTMLElement>('th[data-key]');
      if (!th) return;
      current.sort = nextSort(current.sort, Number(th.dataset.column) as SortKey);
      renderOperatorRows(current);
    });
    body.addEventListener('click', (e) => {
      const tr = (e.target as HTMLElement).closest<HTMLElement>('tr[data-name]');
      if (!tr) return;
      current.timeline.highlightNames([tr.dataset.name ?? '']);
      switchTab('timeline');
    });
  }
  renderOperatorRows(current);
}

function renderOperatorRows(current: Session): void {
  const data = current.keyAverages;
  const table = current.operatorRows;
  if (!data || !table) return;
  const arrow = (key: SortKey) => (current.sort.key === key ? (current.sort.direction === 'asc' ? ' ▲' : ' ▼') : '');
  const head = current.pages.operators.querySelector('[data-testid="operator-table"] thead tr') as HTMLElement;
  head.innerHTML = data.headers.map((h, c) =>
    `<th class="sortable${current.operatorNumeric?.[c] ? ' num' : ''}" data-column="${c}" data-key="${escapeHtml(h)}">` +
    `${escapeHtml(h)}${arrow(c)}</th>`).join('');
  table.setRows(sortRows(data.rows, current.sort.key, current.sort.direction));
}

// ---- Summary and roofline -------------------------------------------------------------------------

// A page waiting on the server: an indeterminate bar and the seconds so far (the first summary of a large
// profile reads its whole trace, which takes seconds), until the answer comes or fails.
function showLoading(page: HTMLElement, what: string, pending: Promise<unknown>): void {
  const started = performance.now();
  page.innerHTML = `<div class="profiles loading" data-testid="loading"><progress></progress> ` +
    `<span class="muted">Loading ${escapeHtml(what)}… <span data-testid="loading-seconds">0</span> s</span></div>`;
  const seconds = page.querySelector('[data-testid="loading-seconds"]') as HTMLElement;
  const timer = window.setInterval(() => {
    if (!seconds.isConnected) window.clearInterval(timer);
    else seconds.textContent = ((performance.now() - started) / 1000).toFixed(0);
  }, 500);
  pending.finally(() => window.clearInterval(timer)).catch(() => {
    if (seconds.isConnected) page.innerHTML = `<p class="error profiles">Loading ${escapeHtml(what)} failed (see above).</p>`;
  });
}

function summaryOf(current: Session): Promise<SummaryAnswer> {
  current.summary ??= api.summary(current.profile);
  current.summary.catch(() => {
    if (session === current) current.summary = undefined; // a failed request is retried next time
  });
  return current.summary;
}

async function showSummary(current: Session): Promise<void> {
  const page = current.pages.summary;
  const answer = summaryOf(current);
  if (page.childElementCount === 0 || page.querySelector('p.error')) showLoading(page, 'the summary', answer);
  const summary = await answer;
  if (session === current) renderSummary(page, summary);
}

async function showRoofline(current: Session): Promise<void> {
  const page = current.pages.roofline;
  const answer = summaryOf(current);
  if (page.childElementCount === 0 || page.querySelector('p.error')) showLoading(page, 'the roofline', answer);
  const summary = await answer;
  if (session !== current) return;
  renderRoofline(page, summary.roofline, (op) => {
    current.timeline.highlightNames([op]);
    switchTab('timeline');
  });
}

// push: a new history entry (a tab the user picked), so Back returns to the previous tab.
function switchTab(tab: Tab, push = true): void {
  tabs.querySelectorAll<HTMLButtonElement>('button').forEach((b) => b.classList.toggle('active', b.dataset.tab === tab));
  if (!session) return;
  if (push && session.tab !== tab) {
    session.tab = tab;
    history.pushState(null, '', currentHash(session));
  }
  session.tab = tab;
  for (const name of TABS) session.pages[name].hidden = name !== tab;
  toolbar.hidden = tab !== 'timeline';
  if (tab === 'operators') void track(showOperators(session));
  else if (tab === 'summary') void track(showSummary(session));
  else if (tab === 'roofline') void track(showRoofline(session));
  else session.timeline.requestDraw();
  scheduleRouteUpdate();
}

// ---- Compare --------------------------------------------------------------------------------------

async function showCompare(route: Route): Promise<void> {
  leaveViews();
  const pick = route.compare ?? {};
  title.textContent = pick.a && pick.b ? `${pick.a} vs ${pick.b}` : '';
  const { profiles } = await api.profiles();
  const range = route.start !== undefined && route.end !== undefined ? { start: route.start, end: route.end } : undefined;
  let rangeTimer: number | undefined;
  const view = new CompareView(app, profiles, { ...pick, range }, {
    onPick: (a, b) => {
      location.hash = formatRoute({ compare: { a, b } });
    },
    onRangeChange: (changed) => {
      window.clearTimeout(rangeTimer);
      rangeTimer = window.setTimeout(() => {
        if (comparison !== view) return;
        const hash = formatRoute({ compare: { a: view.pick.a, b: view.pick.b }, start: changed.start, end: changed.end });
        if (location.hash !== hash) history.replaceState(null, '', hash);
      }, 200);
    },
    track,
  });
  comparison = view;
  await view.load();
}

// ---- Search ---------------------------------------------------------------------------------------

// Steps through every match, fetching the page (hook.searchPage matches, in start order) that holds the
// next one; each match is selected and zoomed to when it is too narrow to see.
async function searchStep(direction: 1 | -1): Promise<void> {
  const current = session;
  const query = searchInput.value.trim();
  if (!current || !query) return;
  const pageSize = Math.max(1, Math.floor(hook.searchPage));
  if (!current.search || current.search.query !== query) {
    const answer = await api.search(current.profile, query, pageSize, 0);
    current.search = { query, pages: new Map([[0, answer.matches]]), total: answer.total, index: -1,
      partial: answer.complete === false };
  }
  const search = current.search;
  if (search.total === 0) {
    searchStatus.textContent = 'no match';
    return;
  }
  const index = (search.index + direction + search.total) % search.total;
  const pageStart = index - (index % pageSize);
  let page = search.pages.get(pageStart);
  if (!page) {
    searchStatus.textContent = `${index + 1} / ${search.total} (loading)`;
    const answer = await api.search(current.profile, query, pageSize, pageStart);
    if (answer.offset === pageStart) {
      page = answer.matches;
      search.pages.set(pageStart, page);
    } else {
      // A server without paging (no offset in its answer) gives the first matches again: take as many
      // as it allows at once (10,000) and page through those.
      const all = await api.search(current.profile, query, 10000);
      for (let start = 0; start < all.matches.length; start += pageSize) {
        search.pages.set(start, all.matches.slice(start, start + pageSize));
      }
      search.total = Math.min(search.total, all.matches.length);
      page = search.pages.get(pageStart);
      if (!page) throw new Error(`this server answers only the first ${all.matches.length} matches of ${answer.total}`);
    }
  }
  const match = page[index - pageStart];
  if (!match || session !== current || current.search !== search) return;
  search.index = index;
  // Matches of the part indexed so far: more may come once the whole trace is indexed.
  searchStatus.textContent = `${index + 1} / ${search.total}${search.partial ? ' so far (indexing)' : ''}`;
  await selectEvent(match.id);
}

// ---- Wiring ---------------------------------------------------------------------------------------

async function route(): Promise<void> {
  clearError();
  const next = parseRoute(location.hash);
  if (next.compare) {
    const current = comparison?.pick;
    if (current && current.a === next.compare.a && current.b === next.compare.b) return;
    await showCompare(next);
    return;
  }
  if (!next.profile) {
    await showProfiles();
    return;
  }
  if (session?.profile === next.profile) {
    // A link into the open profile (or Back/Forward): apply its view, selection and tab. A pending
    // update of the hash from before would write the old view into this entry: drop it.
    window.clearTimeout(routeTimer);
    const current = session;
    if ((next.tab ?? 'timeline') !== current.tab) switchTab(next.tab ?? 'timeline', false);
    const view = current.timeline.view;
    const ranged = next.start !== undefined && next.end !== undefined;
    if (ranged && (Math.abs((next.start as number) - view.start) > 5e-4 || Math.abs((next.end as number) - view.end) > 5e-4)) {
      current.timeline.setView({ start: next.start as number, end: next.end as number }, false);
    }
    if (next.selected !== current.details?.id) await selectEvent(next.selected, !ranged);
    return;
  }
  await openProfile(next);
}

tabs.addEventListener('click', (e) => {
  const tab = (e.target as HTMLElement).dataset.tab;
  if (tab && (TABS as readonly string[]).includes(tab)) switchTab(tab as Tab, true);
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
  if (['INPUT', 'SELECT', 'TEXTAREA'].includes(target.tagName) || target.tagName === 'CANVAS' &&
      target.dataset.testid === 'device-timeline' || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === '?') {
    toggleHelp();
    e.preventDefault();
    return;
  }
  if (e.key === 'Escape' && closeHelp()) return;
  if (comparison) {
    if (comparison.handleKey(e)) e.preventDefault();
    return;
  }
  if (!session || session.tab !== 'timeline') return;
  if (e.key === '/') {
    e.preventDefault(); // not typed into the box
    searchInput.focus();
    searchInput.select();
  } else if (e.key === 'Escape') {
    if (session.timeline.measure) session.timeline.clearMeasure();
    else void track(selectEvent(undefined));
  }
  else if (e.key.toLowerCase() === 'f') {
    if (session.details) session.timeline.zoomToSelection();
    else session.timeline.fitAll();
  } else if (session.timeline.handleKey(e)) e.preventDefault();
});

const HELP_KEYS: [string, string][] = [
  ['W / S', 'zoom in / out (at the mouse)'], ['A / D', 'pan left / right'], ['Shift + W A S D', 'bigger steps'],
  ['Ctrl + wheel', 'zoom at the mouse'], ['wheel', 'scroll the lanes'], ['Shift + wheel', 'pan'],
  ['drag', 'pan'], ['Shift + drag, drag on the ruler', 'measure a range: what it covers, by name'], ['F', 'zoom to the selection (fit all without one)'],
  ['0', 'fit the whole profile'], ['M', 'mark the selection (or the measured range); again to clear'],
  ['/', 'search'], ['Enter / Shift + Enter', 'next / previous match'], ['Esc', 'clear the measured area, else the selection; close this'],
  ['?', 'this help'],
];

function toggleHelp(): void {
  if (closeHelp()) return;
  const overlay = document.createElement('div');
  overlay.className = 'help';
  overlay.dataset.testid = 'help';
  overlay.innerHTML = `<div class="help-box"><h3>Keyboard and mouse</h3><table>${HELP_KEYS.map(([keys, what]) =>
    `<tr><td>${keys.split(', ').map((k) => `<kbd>${escapeHtml(k)}</kbd>`).join(' ')}</td><td>${escapeHtml(what)}</td></tr>`).join('')}` +
    '</table><p class="muted">Press ? or Esc to close.</p></div>';
  overlay.addEventListener('click', () => overlay.remove());
  document.body.append(overlay);
}

function closeHelp(): boolean {
  const open = document.querySelector('[data-testid="help"]');
  open?.remove();
  return open !== null;
}

// Back/Forward between entries that pushState made (tabs) fires only popstate; following a link fires
// popstate and hashchange both: the second is dropped while the first is routing that hash (route() is
// idempotent once it is done).
let routing: string | undefined;
const onNavigate = () => {
  if (routing === location.hash) return;
  const hash = location.hash;
  routing = hash;
  void track(route().finally(() => {
    if (routing === hash) routing = undefined;
  }));
};
window.addEventListener('hashchange', onNavigate);
window.addEventListener('popstate', onNavigate);
void track(route());
