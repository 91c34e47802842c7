// The JSON API of sightline-serve (src/server/http_server.h). Every error answer is {"error": message},
// raised here as ApiError so the UI can show the message.

import type { LaneInfo } from './lanes';

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
    files: number;
    bytes: number;
  };
}

export interface LanesAnswer {
  start: number;
  end: number;
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

export interface WindowAnswer {
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
  ts: number;
  dur: number;
  depth: number;
}

export interface FlowLink {
  category: string;
  event: EventSummary;
}

export interface EventDetails extends EventSummary {
  args: Record<string, unknown>;
  flows_in: FlowLink[];
  flows_out: FlowLink[];
  same_launch: EventSummary[];
}

export interface SearchAnswer {
  query: string;
  total: number;
  matches: EventSummary[];
}

export interface KeyAverageRow {
  name: string;
  count: number;
  cpu_total_us: number;
  self_cpu_us: number;
  device_total_us: number;
  self_device_us: number;
}

export interface KeyAveragesAnswer {
  source: string;
  device: string;
  rows: KeyAverageRow[];
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
  correlation: number;
  start_ns: number;
  duration_ns: number;
  executions: number;
  source_ops: string[];
  rows: DeviceRow[];
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

async function request<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await fetch(path, init);
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ApiError(`${path}: the server answered ${response.status} with non-JSON text`, response.status);
  }
  if (!response.ok) {
    const message = (body as { error?: string }).error ?? `${path}: HTTP ${response.status}`;
    throw new ApiError(message, response.status);
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
  search: (name: string, text: string) =>
    request<SearchAnswer>(`${profilePath(name)}/search?${new URLSearchParams({ q: text })}`),
  keyAverages: (name: string) => request<KeyAveragesAnswer>(`${profilePath(name)}/key_averages`),
  device: (name: string, neff: string, core: number, seq?: number) => {
    const query = new URLSearchParams({ neff, core: String(core) });
    if (seq !== undefined) query.set('seq', String(seq));
    return request<DeviceAnswer>(`${profilePath(name)}/device?${query}`);
  },
  remove: (name: string) => request<{ deleted: string }>(profilePath(name), { method: 'DELETE' }),
};
