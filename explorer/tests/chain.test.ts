import { describe, expect, it } from 'vitest';
import type { EventDetails, EventSummary } from '../src/api';
import { buildChain, chainRows, deviceQueryOf, executionInChain, hasChain } from '../src/chain';

// The server sends each summary's layer (its reading of the lane name); the fixtures name it likewise.
const layerOfName = (lane: string) =>
  lane.includes('/framework/') ? 'framework' : lane.includes('_rt/') ? 'runtime' : lane.includes('_hw/') ? 'hardware' : 'other';
const summary = (id: number, name: string, lane: string, ts: number): EventSummary => ({
  id, name, cat: 'x', lane: 0, lane_name: lane, layer: layerOfName(lane), ts, dur: 1, depth: 0,
});
const mul = summary(1, 'aten::mul', 'h/1/framework/TID:0', 10);
const schedule = summary(2, 'nrta_execute_schedule', 'h/1/neuron_rt/NC:0', 11);
const copyIn = summary(3, 'dmem_buf_copyin', 'h/1/neuron_hw/NC:0', 12);
const exec = summary(4, 'nc_exec_running', 'h/1/neuron_hw/NC:0', 13);

const details: Record<number, EventDetails> = {
  1: { ...mul, args: {}, flows_in: [], flows_out: [{ category: 'fwd', event: schedule }], same_launch: [] },
  2: { ...schedule, args: {}, flows_in: [{ category: 'fwd', event: mul }], flows_out: [{ category: 'ac2g', event: copyIn }], same_launch: [] },
  3: { ...copyIn, args: { correlation: 9 }, flows_in: [{ category: 'ac2g', event: schedule }], flows_out: [], same_launch: [exec] },
  4: { ...exec, args: { neff: 'neff_0123456789abcdef.neff', 'neuron core': 0, sequence: 7 }, flows_in: [], flows_out: [],
    same_launch: [copyIn] },
};
const fetchEvent = async (id: number) => details[id];

describe('dependency chain', () => {
  it('follows a framework op down to the hardware execution of its launch', async () => {
    const chain = await buildChain(details[1], fetchEvent);
    expect(chain.upstream).toEqual([]);
    expect(chain.downstream.map((l) => [l.event.name, l.layer, l.via])).toEqual([
      ['nrta_execute_schedule', 'runtime', 'fwd'],
      ['dmem_buf_copyin', 'hardware', 'ac2g'],
      ['nc_exec_running', 'hardware', 'launch'],
    ]);
    expect(executionInChain(chain)?.id).toBe(4);
  });

  it('walks upstream from an execution that is not the launch flow target', async () => {
    const chain = await buildChain(details[4], fetchEvent);
    // The execution hangs under its launch's copy-in, the flow's target.
    expect(chain.upstream.map((l) => l.event.name)).toEqual(['aten::mul', 'nrta_execute_schedule', 'dmem_buf_copyin']);
    expect(hasChain(details[4])).toBe(true);
  });

  // The naive profile's aten::mul: two flows out (an allocation and a schedule), the schedule's ac2g flow
  // to the execution. No edge between the allocation and the schedule.
  const alloc = summary(5, 'nrt_dma_mem_alloc', 'h/1/neuron_rt/NC:0', 10.5);
  const exec2 = summary(6, 'nc_exec_running', 'h/1/neuron_hw/NC:0', 20);
  const tree: Record<number, EventDetails> = {
    1: { ...mul, args: {}, flows_in: [], flows_out: [{ category: 'fwd', event: schedule }, { category: 'fwd', event: alloc }], same_launch: [] },
    5: { ...alloc, args: {}, flows_in: [{ category: 'fwd', event: mul }], flows_out: [], same_launch: [] },
    2: { ...schedule, args: {}, flows_in: [{ category: 'fwd', event: mul }], flows_out: [{ category: 'ac2g', event: exec2 }], same_launch: [] },
    6: { ...exec2, args: {}, flows_in: [{ category: 'ac2g', event: schedule }], flows_out: [], same_launch: [] },
  };
  const edgesOf = (edges: { from: { name: string }; to: { name: string }; category: string }[]) =>
    edges.map((e) => `${e.from.name} -${e.category}-> ${e.to.name}`).sort();

  it('draws only the flows of the trace, as the tree op -> {allocation, schedule -> execution}', async () => {
    const chain = await buildChain(tree[1], async (id) => tree[id]);
    expect(edgesOf(chain.edges)).toEqual([
      'aten::mul -fwd-> nrt_dma_mem_alloc', 'aten::mul -fwd-> nrta_execute_schedule', 'nrta_execute_schedule -ac2g-> nc_exec_running',
    ]);
    expect(chainRows(chain).map((r) => `${'  '.repeat(r.depth)}${r.link.event.name}`)).toEqual([
      'aten::mul', '  nrt_dma_mem_alloc', '  nrta_execute_schedule', '    nc_exec_running',
    ]);
  });

  it('is the same tree whichever end it is opened from', async () => {
    const fromOp = await buildChain(tree[1], async (id) => tree[id]);
    const fromExec = await buildChain(tree[6], async (id) => tree[id]);
    const fromAlloc = await buildChain(tree[5], async (id) => tree[id]);
    expect(edgesOf(fromExec.edges)).toEqual(edgesOf(fromOp.edges));
    expect(edgesOf(fromAlloc.edges)).toEqual(edgesOf(fromOp.edges));
    expect(chainRows(fromExec).map((r) => r.link.event.id)).toEqual(chainRows(fromOp).map((r) => r.link.event.id));
    expect(fromExec.upstream.map((l) => l.event.name)).toEqual(['aten::mul', 'nrta_execute_schedule']);
    expect(fromAlloc.downstream).toEqual([]);
  });

  it('stops on cycles', async () => {
    const loop: Record<number, EventDetails> = {
      1: { ...mul, args: {}, flows_in: [{ category: 'fwd', event: schedule }], flows_out: [{ category: 'fwd', event: schedule }], same_launch: [] },
      2: { ...schedule, args: {}, flows_in: [{ category: 'fwd', event: mul }], flows_out: [{ category: 'fwd', event: mul }], same_launch: [] },
    };
    const chain = await buildChain(loop[1], async (id) => loop[id]);
    expect(chain.upstream.length + chain.downstream.length).toBe(1);
  });

  it('reads the device query from nc_exec_running args', () => {
    expect(deviceQueryOf(details[4])).toEqual({ neff: 'neff_0123456789abcdef.neff', core: 0, seq: 7 });
    expect(deviceQueryOf(details[1])).toBeUndefined();
  });
});
