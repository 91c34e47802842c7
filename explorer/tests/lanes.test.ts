import { describe, expect, it } from 'vitest';
import { groupLanes, layerOf, layoutLanes, ROW_HEIGHT, GROUP_HEADER_HEIGHT, type LaneInfo, type Layer } from '../src/lanes';

// A lane as the server sends it: the name's parts and layer come from src/profiler/lane_names.h.
const lane = (id: number, name: string, max_depth = 0): LaneInfo => {
  const [instance, process, subsystem, identifier] = name.split('/');
  const layer: Layer =
    subsystem === 'framework' ? 'framework' : subsystem.endsWith('_rt') ? 'runtime' : subsystem.endsWith('_hw') ? 'hardware' : 'other';
  return { id, name, events: 1, max_depth, layer, instance, process, subsystem, identifier };
};
const lanes = [
  lane(0, 'host/42/framework/TID:0', 2),
  lane(1, 'host/42/framework/TID:1'),
  lane(2, 'host/42/neuron_rt/NC:0'),
  lane(3, 'host/42/neuron_hw/NC:0'),
  lane(4, 'host/42/neuron_hw/NC:1'),
];

describe('lanes', () => {
  it('takes the layer the server sent, other when it sent none', () => {
    expect(layerOf(lanes[0])).toBe('framework');
    expect(layerOf(lanes[2])).toBe('runtime');
    expect(layerOf(lanes[3])).toBe('hardware');
    expect(layerOf({})).toBe('other');
  });

  it('groups by subsystem by default and by core on request', () => {
    expect(groupLanes(lanes, 'default').map((g) => g.key)).toEqual([
      'host/42/framework', 'host/42/neuron_rt', 'host/42/neuron_hw',
    ]);
    const byCore = groupLanes(lanes, 'core');
    expect(byCore.map((g) => g.key)).toEqual(['host/42/framework', 'host/NC:0', 'host/NC:1']);
    expect(byCore[1].lanes.map((l) => l.id)).toEqual([2, 3]);
    expect(groupLanes(lanes, 'process')).toHaveLength(1);
  });

  it('lays out one row per depth and skips collapsed groups', () => {
    const groups = groupLanes(lanes, 'default');
    const layout = layoutLanes(groups, new Set());
    expect(layout.lanes[0].height).toBe(3 * ROW_HEIGHT + 4);
    expect(layout.lanes[1].y).toBe(GROUP_HEADER_HEIGHT + 3 * ROW_HEIGHT + 4);
    const collapsed = layoutLanes(groups, new Set(['host/42/framework']));
    expect(collapsed.lanes.map((l) => l.lane.id)).toEqual([2, 3, 4]);
    expect(collapsed.lanes[0].y).toBe(2 * GROUP_HEADER_HEIGHT);
  });
});
