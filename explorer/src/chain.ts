// The dependency chain of one event: framework op -> runtime call -> hardware execution, built by
// following flows ("fwd": op -> runtime call, "ac2g": runtime call -> first hardware event of the
// launch) and the other hardware events of the same launch (nc_exec_running after a copy-in).

import type { EventDetails, EventSummary } from './api';
import { LAYER_ORDER, layerOf, type Layer } from './lanes';

export interface ChainLink {
  event: EventSummary;
  layer: Layer;
  via: string; // flow category, "launch" for a same-launch event, "selected" for the start
}

// An edge of the chain: a flow of the trace (fwd, ac2g), or "launch" from a hardware event to another
// event of the same launch (not a flow: shown in the tree, never drawn as an arrow).
export interface ChainEdge {
  from: EventSummary;
  to: EventSummary;
  category: string;
}

export interface ChainNode {
  link: ChainLink;
  children: ChainNode[];
}

export interface Chain {
  selected: EventSummary;
  root: ChainNode; // the whole tree, from the op (or the first event without an incoming flow) down
  edges: ChainEdge[]; // every edge of the tree, parent first
  upstream: ChainLink[]; // the selected event's ancestors in the tree, from the root down
  downstream: ChainLink[]; // its descendants, ordered by layer, then time
}

export type FetchEvent = (id: number) => Promise<EventDetails>;

const link = (event: EventSummary, via: string): ChainLink => ({ event, layer: layerOf(event), via });

export function hasChain(details: EventDetails): boolean {
  return details.flows_in.length > 0 || details.flows_out.length > 0 || details.same_launch.length > 0;
}

// The dependency tree around `start`, the same whichever of its events it is built from: up to the
// root over incoming flows (a hardware event without one goes through the events of its launch), then
// the tree below the root over outgoing flows and same-launch events. Only edges that are in the
// trace are in it: op -> {allocation, schedule -> execution}, never op -> allocation -> schedule.
export async function buildChain(start: EventDetails, fetchEvent: FetchEvent, maxSteps = 16): Promise<Chain> {
  // Up: the root.
  let rootDetails: EventDetails = start;
  const climbed = new Set<number>([start.id]);
  for (let step = 0; step < maxSteps; step++) {
    let incoming = rootDetails.flows_in[0];
    if (!incoming && layerOf(rootDetails) === 'hardware') {
      for (const sibling of rootDetails.same_launch) {
        const siblingDetails = await fetchEvent(sibling.id);
        if (siblingDetails.flows_in.length > 0) {
          incoming = siblingDetails.flows_in[0];
          break;
        }
      }
    }
    if (!incoming || climbed.has(incoming.event.id)) break;
    climbed.add(incoming.event.id);
    rootDetails = await fetchEvent(incoming.event.id);
  }

  // Down: breadth first from the root; each event once, at its first (shallowest) place.
  const root: ChainNode = { link: link(summaryOf(rootDetails), 'root'), children: [] };
  const edges: ChainEdge[] = [];
  const parentOf = new Map<number, ChainNode>();
  const nodeOf = new Map<number, ChainNode>([[rootDetails.id, root]]);
  const queue: [ChainNode, EventDetails][] = [[root, rootDetails]];
  for (let visited = 0; queue.length > 0 && visited < maxSteps * 4; visited++) {
    const [node, details] = queue.shift() as [ChainNode, EventDetails];
    const next: ChainEdge[] = details.flows_out.map((f) => ({ from: details, to: f.event, category: f.category }));
    // Same-launch events hang under the launch's flow target (the first hardware event reached).
    if (layerOf(details) === 'hardware' && details.flows_in.length > 0) {
      for (const sibling of details.same_launch) next.push({ from: details, to: sibling, category: 'launch' });
    }
    for (const edge of next) {
      if (nodeOf.has(edge.to.id)) continue;
      const child: ChainNode = { link: link(edge.to, edge.category), children: [] };
      node.children.push(child);
      nodeOf.set(edge.to.id, child);
      parentOf.set(edge.to.id, node);
      edges.push({ from: summaryOf(details), to: edge.to, category: edge.category });
      queue.push([child, await fetchEvent(edge.to.id)]);
    }
  }
  for (const node of nodeOf.values()) {
    node.children.sort((a, b) => LAYER_ORDER[a.link.layer] - LAYER_ORDER[b.link.layer] || a.link.event.ts - b.link.event.ts);
  }

  // The selected event's place in it (not found when the tree was cut short: then it is its own root).
  const upstream: ChainLink[] = [];
  const downstream: ChainLink[] = [];
  const selectedNode = nodeOf.get(start.id);
  if (selectedNode) {
    for (let parent = parentOf.get(start.id); parent; parent = parentOf.get(parent.link.event.id)) {
      upstream.unshift(parent.link);
    }
    const collect = (node: ChainNode) => {
      for (const child of node.children) {
        downstream.push(child.link);
        collect(child);
      }
    };
    collect(selectedNode);
    downstream.sort((a, b) => LAYER_ORDER[a.layer] - LAYER_ORDER[b.layer] || a.event.ts - b.event.ts);
  }
  return { selected: summaryOf(start), root, edges, upstream, downstream };
}

function summaryOf(details: EventSummary): EventSummary {
  const { id, name, cat, lane, lane_name, layer, ts, dur, depth } = details;
  return { id, name, cat, lane, lane_name, layer, ts, dur, depth };
}

// The tree's events in display order (depth first), with their depth.
export function chainRows(chain: Chain): { link: ChainLink; depth: number }[] {
  const rows: { link: ChainLink; depth: number }[] = [];
  const walk = (node: ChainNode, depth: number) => {
    rows.push({ link: node.link, depth });
    for (const child of node.children) walk(child, depth + 1);
  };
  walk(chain.root, 0);
  return rows;
}

// The hardware execution a chain leads to, if any: what the device timeline opens.
export function executionInChain(chain: Chain): EventSummary | undefined {
  if (chain.selected.name === 'nc_exec_running') return chain.selected;
  return chainRows(chain).find((r) => r.link.event.name === 'nc_exec_running')?.link.event;
}

// Parameters of the device query for an nc_exec_running event: its executable, core and sequence.
export function deviceQueryOf(details: EventDetails): { neff: string; core: number; seq?: number } | undefined {
  const neff = details.args['neff'];
  if (typeof neff !== 'string') return undefined;
  const coreArg = details.args['neuron core'] ?? details.args['device'];
  const seqArg = details.args['sequence'];
  const core = typeof coreArg === 'number' ? coreArg : 0;
  return { neff, core, seq: typeof seqArg === 'number' ? seqArg : undefined };
}
