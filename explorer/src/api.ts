// The JSON API of `sightline serve` (src/server/http_server.h). Every error answer is {"error": message},
// raised here as ApiError so the UI can show the message.

import type { Layer, LaneInfo } from './lanes';
import { parseJsonLossless } from './lossless_json';

export interface ProfileEntry {
  name: string;
  ok: boolean;
  error?: string;
  manifest?: {
    created_utc: string;
    device: string;
    core_version: string;
    modes: string[];
    captured_cores: number[];
    events: { framework: number; runtime: number; hardware: number; instruction_records: number };
    dropped: number;
    timing?: { host_clock: string; functional: boolean; simulation_wall_ns: number; left_out: number };
    files: number;
    bytes: number;
  };
}

// While the server has indexed only the first part of a large trace (src/server/profile_index.h, the
// first view), its answers of lanes, events, search and event details carry "complete": false and how
// far the indexing of the whole file is; a complete answer has neither.
export interface IndexProgress {
  first_view_bytes: number; // the part of trace.json the partial answers cover
  indexed_bytes: number; // read so far by the indexing of the whole file
  trace_bytes: number;
  fraction: number; // indexed_bytes / trace_bytes
}

export interface PartialStatus {
  complete?: false;
  progress?: IndexProgress;
}

export interface LanesAnswer extends PartialStatus {
  start: number;
  end: number;
  origin_us?: number;
  lanes: LaneInfo[];
  flows: number;
}

export interface WindowEvent {
  id: number;
  ts: number;
  dur: number;
  depth: number;
  name: string;
}

export interface MergedEvents {
  ts: number;
  dur: number;
  depth: number;
  count: number;
  name: string;
}

export interface WindowAnswer extends PartialStatus {
  start: number;
  end: number;
  pixel_us: number;
  lanes: { lane: number; events: WindowEvent[]; merged: MergedEvents[] }[];
  event_count: number;
  merged_count: number;
}

export interface EventSummary {
  id: number;
  name: string;
  cat: string;
  lane: number;
  lane_name: string;
  layer: Layer; // framework, runtime, hardware or other: the server's reading of the lane name
  ts: number;
  dur: number;
  depth: number;
}

export interface FlowLink {
  category: string;
  event: EventSummary;
}

export interface EventDetails extends EventSummary, PartialStatus {
  args: Record<string, unknown>; // integers beyond 2^53 (correlation ids) are BigInt
  flows_in: FlowLink[];
  flows_out: FlowLink[];
  same_launch: EventSummary[];
}

export interface SearchAnswer extends PartialStatus {
  query: string;
  total: number;
  offset?: number; // the index of matches[0] among all; absent from servers that cannot page
  matches: EventSummary[];
}

export interface KeyAverageRow {
  name: string;
  count: number;
  cpu_total_us: number;
  self_cpu_us: number;
  device_total_us: number;
  self_device_us: number;
  cells: string[];  // the row of `sightline table` (--row-limit -1), cell by cell, as the CLI prints them
}

export interface KeyAveragesAnswer {
  source: string;
  device: string;
  headers: string[];  // the table's column names; each row's cells are in this order
  rows: KeyAverageRow[];  // in the CLI's default order: self device time, descending
  footer: string[];  // the lines under the table ("Self CPU time total: ...", notes)
  self_cpu_total_us: number;
  self_device_total_us: number;
}

export interface DeviceRecord {
  start: number;
  dur: number;
  op: number;
  opcode: string;
  hbm_read: number;
  hbm_written: number;
  onchip: number;
  flops: number;
  semaphore_wait: number;
}

export interface DeviceRow {
  name: string;
  engine: string;
  queue: number;
  records: DeviceRecord[];
}

export interface DeviceAnswer {
  neff: string;
  executable: string;
  core: number;
  sequence: number;
  correlation: number | bigint; // 64-bit: a BigInt when beyond 2^53
  start_ns: number;
  duration_ns: number;
  executions: number;
  source_ops: string[];
  rows: DeviceRow[];
}

// One ranked finding of the summary: what was seen (evidence), what to do (fix) and the device time it
// could save.
export interface Insight {
  id: string;
  title: string;
  evidence: string;
  fix: string;
  potential_saving_us: number;
}

export interface RooflinePoint {
  kind: 'executable' | 'op';
  name: string;
  intensity: number; // FLOP per HBM byte
  achieved_flops_per_s: number;
  attainable_flops_per_s: number;
  bound: string;
  efficiency: number; // achieved / attainable
  time_us: number;
  roof?: string; // the engine and width whose share of the FLOPs binds ("Vector fp32"); "" without FLOPs
  compute_roof_flops_per_s?: number; // its compute ceiling
}

// A compute roof: one engine at one operand width (src/analysis/roofline.h).
export interface Roof {
  name: string;
  flops_per_s: number;
}

export interface RooflineData {
  peak_flops_per_s: number;
  hbm_bytes_per_s: number;
  ridge_point: number; // FLOP per byte where the bandwidth slope meets the compute roof
  roofs?: Roof[]; // every engine and width, highest first (the first is peak_flops_per_s)
  points: RooflinePoint[];
}

// `sightline view DIR --output-format summary-json`: flat metrics (numbers, plus a few strings such as
// "bound" and "device"), the insights and the roofline.
// One core of one rank at collectives (src/analysis/collectives.h: CollectiveLane, times in us).
export interface CollectiveLaneData {
  rank: number;
  core: number;
  collectives: number;
  active_us: number; // cc_running
  wait_us: number; // waiting for the slowest peer
  busy_us: number; // nc_exec_running
  span_us: number;
  last_arrivals: number; // collectives this lane reached last (a straggler)
  late_us: number;
}

// The server adds it to the summary of a profile that ran collectives (one rank, or ranks merged).
export interface CollectivesData {
  world_size: number;
  collectives: number;
  active_us: number;
  wait_us: number;
  collective_time_us: number;
  bus_bytes: number;
  bus_gbps: number; // achieved bus bandwidth, GB/s (bytes per ns)
  link_gbps: number; // the spec's link peak
  lanes: CollectiveLaneData[];
}

// A merged profile's (sightline merge) summary per rank: each rank's own summary metrics, and the rank with
// the most device time.
export interface RankSummaryRow {
  rank: number;
  [metric: string]: unknown;
}

export interface StragglerData {
  rank: number;
  fastest_rank: number;
  excess_us: number;
}

export interface SummaryAnswer {
  insights: Insight[];
  roofline: RooflineData;
  collectives?: CollectivesData;
  ranks?: RankSummaryRow[];
  straggler?: StragglerData;
  [metric: string]: unknown;
}

export type DeltaStatus = 'removed' | 'added' | 'changed';

// One row of analysis::compare_json: an executable, a source op or an engine in A and in B.
export interface CompareRow {
  kind: 'executable' | 'op' | 'engine';
  name: string;
  status: DeltaStatus;
  count_a: number;
  count_b: number;
  time_a_ns: number;
  time_b_ns: number;
  delta_ns: number; // B - A
}

export interface CompareAnswer {
  a: string;
  b: string;
  total_a_us: number;
  total_b_us: number;
  ranked: CompareRow[];
}

export interface UploadAnswer {
  uploaded: string;
  files: number;
  bytes: number;
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

// The message of an error answer: the server's {"error": ...} when there is one.
export function errorMessage(path: string, status: number, text: string): string {
  try {
    const body = JSON.parse(text) as { error?: unknown };
    if (typeof body.error === 'string' && body.error) return body.error;
  } catch {
    // not JSON: fall through
  }
  return `${path}: the server answered HTTP ${status}${text.trim() ? ` (${text.trim().slice(0, 200)})` : ''}`;
}

// The server's per-run token, which it requires on uploads and deletes (and on every request when it
// listens beyond loopback): `sightline serve` prints http://127.0.0.1:PORT/?token=..., so the page's
// own query holds it. It is kept for the tab, so a reload or a deep link without it still works.
export const TOKEN_HEADER = 'X-Sightline-Token';
const TOKEN_KEY = 'sightline-token';

interface TokenStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

export function tokenFromPage(search: string, storage?: TokenStorage): string | undefined {
  const fromUrl = new URLSearchParams(search).get('token') || undefined;
  try {
    if (fromUrl) storage?.setItem(TOKEN_KEY, fromUrl);
    return fromUrl ?? storage?.getItem(TOKEN_KEY) ?? undefined;
  } catch {
    return fromUrl; // storage refused (private mode): the URL's token still works
  }
}

let pageToken: string | undefined | null = null;
function serverToken(): string | undefined {
  if (pageToken === null) {
    pageToken =
      typeof window === 'undefined' ? undefined : tokenFromPage(window.location.search, window.sessionStorage);
  }
  return pageToken;
}

function withToken(init?: RequestInit): RequestInit | undefined {
  const token = serverToken();
  if (!token) return init;
  const headers = new Headers(init?.headers);
  headers.set(TOKEN_HEADER, token);
  return { ...init, headers };
}

async function request<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await fetch(path, withToken(init));
  const text = await response.text();
  if (!response.ok) throw new ApiError(errorMessage(path, response.status, text), response.status);
  let body: unknown;
  try {
    body = parseJsonLossless(text); // 64-bit ids (correlation) stay exact, as BigInt
  } catch {
    throw new ApiError(`${path}: the server answered ${response.status} with non-JSON text`, response.status);
  }
  return body as T;
}

const profilePath = (name: string) => `/api/profiles/${encodeURIComponent(name)}`;

export const api = {
  profiles: () => request<{ profiles: ProfileEntry[] }>('/api/profiles'),
  lanes: (name: string) => request<LanesAnswer>(`${profilePath(name)}/lanes`),
  events: (name: string, start: number, end: number, widthPx: number, lanes?: number[]) => {
    const query = new URLSearchParams({ start: String(start), end: String(end), width: String(widthPx) });
    if (lanes && lanes.length > 0) query.set('lanes', lanes.join(','));
    return request<WindowAnswer>(`${profilePath(name)}/events?${query}`);
  },
  event: (name: string, id: number) => request<EventDetails>(`${profilePath(name)}/events/${id}`),
  search: (name: string, text: string, limit?: number, offset?: number) => {
    const query = new URLSearchParams({ q: text });
    if (limit !== undefined) query.set('limit', String(limit));
    if (offset !== undefined) query.set('offset', String(offset));
    return request<SearchAnswer>(`${profilePath(name)}/search?${query}`);
  },
  keyAverages: (name: string) => request<KeyAveragesAnswer>(`${profilePath(name)}/key_averages`),
  device: (name: string, neff: string, core: number, seq?: number) => {
    const query = new URLSearchParams({ neff, core: String(core) });
    if (seq !== undefined) query.set('seq', String(seq));
    return request<DeviceAnswer>(`${profilePath(name)}/device?${query}`);
  },
  remove: (name: string) => request<{ deleted: string }>(profilePath(name), { method: 'DELETE' }),
  summary: (name: string) => request<SummaryAnswer>(`${profilePath(name)}/summary`),
  compare: (a: string, b: string) => request<CompareAnswer>(`/api/compare?${new URLSearchParams({ a, b })}`),
  upload,
};

// POST /api/profiles?name=NAME, multipart with one "file" part per file named as inside the profile
// directory. XMLHttpRequest rather than fetch because only it reports upload progress.
function upload(name: string, files: readonly File[], onProgress?: (sent: number, total: number) => void):
    Promise<UploadAnswer> {
  const path = `/api/profiles?${new URLSearchParams({ name })}`;
  const form = new FormData();
  for (const file of files) form.append('file', file, file.name);
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', path);
    const token = serverToken();
    if (token) xhr.setRequestHeader(TOKEN_HEADER, token);
    xhr.upload.addEventListener('progress', (e) => onProgress?.(e.loaded, e.lengthComputable ? e.total : 0));
    xhr.addEventListener('load', () => {
      if (xhr.status < 200 || xhr.status >= 300) {
        reject(new ApiError(errorMessage(path, xhr.status, xhr.responseText), xhr.status));
        return;
      }
      try {
        resolve(JSON.parse(xhr.responseText) as UploadAnswer);
      } catch {
        reject(new ApiError(`${path}: the server answered ${xhr.status} with non-JSON text`, xhr.status));
      }
    });
    xhr.addEventListener('error', () =>
      reject(new ApiError(`${path}: the upload failed before the server answered (connection closed or refused)`, 0)));
    xhr.send(form);
  });
}
