// Lane naming and grouping. Lane names follow instance/PID/subsystem/identifier
// (host/1234/framework/TID:0, host/1234/neuron_rt/NC:0, host/1234/neuron_hw/NC:0).

export interface LaneInfo {
  id: number;
  name: string;
  events: number;
  max_depth: number;
}

export interface LaneName {
  instance: string;
  pid: string;
  subsystem: string;
  identifier: string;
}

export function parseLaneName(name: string): LaneName {
  const parts = name.split('/');
  if (parts.length < 4) {
    return { instance: parts[0] ?? '', pid: parts[1] ?? '', subsystem: parts[2] ?? '', identifier: parts.at(-1) ?? '' };
  }
  const identifier = parts[parts.length - 1];
  const subsystem = parts[parts.length - 2];
  const pid = parts[parts.length - 3];
  const instance = parts.slice(0, parts.length - 3).join('/');
  return { instance, pid, subsystem, identifier };
}

export type Layer = 'framework' | 'runtime' | 'hardware' | 'other';

export function layerOf(laneName: string): Layer {
  const { subsystem } = parseLaneName(laneName);
  if (subsystem === 'framework') return 'framework';
  if (subsystem.endsWith('_rt')) return 'runtime';
  if (subsystem.endsWith('_hw')) return 'hardware';
  return 'other';
}

export const LAYER_ORDER: Record<Layer, number> = { framework: 0, runtime: 1, hardware: 2, other: 3 };

export type GroupingMode = 'default' | 'core' | 'thread' | 'process';

export interface LaneGroup {
  key: string;
  label: string;
  lanes: LaneInfo[];
}

// default: instance/PID/subsystem; core: one group per identifier across subsystems (NC:0 runtime and
// hardware together); thread: instance/PID/identifier; process: instance/PID.
export function groupLanes(lanes: LaneInfo[], mode: GroupingMode): LaneGroup[] {
  const groups = new Map<string, LaneGroup>();
  for (const lane of lanes) {
    const n = parseLaneName(lane.name);
    let key: string;
    switch (mode) {
      case 'default':
        key = `${n.instance}/${n.pid}/${n.subsystem}`;
        break;
      case 'core':
        key = n.identifier.startsWith('NC:') ? `${n.instance}/${n.identifier}` : `${n.instance}/${n.pid}/${n.subsystem}`;
        break;
      case 'thread':
        key = `${n.instance}/${n.pid}/${n.identifier}`;
        break;
      case 'process':
        key = `${n.instance}/${n.pid}`;
        break;
    }
    let group = groups.get(key);
    if (!group) {
      group = { key, label: key, lanes: [] };
      groups.set(key, group);
    }
    group.lanes.push(lane);
  }
  return [...groups.values()];
}

export const ROW_HEIGHT = 18;
export const GROUP_HEADER_HEIGHT = 22;

export interface LaneLayout {
  lane: LaneInfo;
  y: number;
  height: number;
}

export interface GroupLayout {
  group: LaneGroup;
  y: number;
  collapsed: boolean;
}

export interface Layout {
  lanes: LaneLayout[];
  groups: GroupLayout[];
  height: number;
}

// Vertical layout: a header per group, then one row per nesting depth of each lane.
export function layoutLanes(groups: LaneGroup[], collapsed: ReadonlySet<string>): Layout {
  const lanes: LaneLayout[] = [];
  const groupLayouts: GroupLayout[] = [];
  let y = 0;
  for (const group of groups) {
    const isCollapsed = collapsed.has(group.key);
    groupLayouts.push({ group, y, collapsed: isCollapsed });
    y += GROUP_HEADER_HEIGHT;
    if (isCollapsed) continue;
    for (const lane of group.lanes) {
      const height = (lane.max_depth + 1) * ROW_HEIGHT + 4;
      lanes.push({ lane, y, height });
      y += height;
    }
  }
  return { lanes, groups: groupLayouts, height: y };
}
