// Lane naming and grouping. Lane names follow instance/PID/subsystem/identifier
// (host/1234/framework/TID:0, host/1234/neuron_rt/NC:0, host/1234/neuron_hw/NC:0). The server takes
// them apart (src/profiler/lane_names.h, the one reader of lane names) and sends the parts and the
// layer with each lane and each event summary; the UI never parses a lane name itself.

export type Layer = 'framework' | 'runtime' | 'hardware' | 'other';

export interface LaneInfo {
  id: number;
  name: string;
  events: number;
  max_depth: number;
  layer: Layer;
  instance: string;
  process: string; // the PID part of the name
  subsystem: string;
  identifier: string;
}

// The layer of a lane or an event summary, as the server classified it.
export function layerOf(item: { layer?: Layer }): Layer {
  return item.layer ?? 'other';
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
  for (const n of lanes) {
    let key: string;
    switch (mode) {
      case 'default':
        key = `${n.instance}/${n.process}/${n.subsystem}`;
        break;
      case 'core':
        key = n.identifier.startsWith('NC:') ? `${n.instance}/${n.identifier}` : `${n.instance}/${n.process}/${n.subsystem}`;
        break;
      case 'thread':
        key = `${n.instance}/${n.process}/${n.identifier}`;
        break;
      case 'process':
        key = `${n.instance}/${n.process}`;
        break;
    }
    const lane = n;
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
