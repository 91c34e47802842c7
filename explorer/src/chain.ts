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

export interface Chain {
  selected: EventSummary;
  upstream: ChainLink[]; // ordered from the root cause down to the selected event's direct parent
  downstream: ChainLink[]; // ordered by layer, then time
}

export type FetchEvent = (id: number) => Promise<EventDetails>;

const link = (event: EventSummary, via: string): ChainLink => ({ event, layer: layerOf(event.lane_name), via });

export function hasChain(details: EventDetails): boolean {
  return details.flows_in.length > 0 || details.flows_out.length > 0 || details.same_launch.length > 0;
}

export async function buildChain(start: EventDetails, fetchEvent: FetchEvent, maxSteps = 16): Promise<Chain> {
  const seen = new Set<number>([start.id]);

  // Upstream: follow incoming flows; a hardware event without one borrows its launch's first event.
  const upstream: ChainLink[] = [];
  let current: EventDetails | undefined = start;
  for (let step = 0; current && step < maxSteps; step++) {
    let incoming = current.flows_in[0];
    if (!incoming && layerOf(current.lane_name) === 'hardware') {
      for (const sibling of current.same_launch) {
        if (seen.has(sibling.id)) continue;
        const siblingDetails = await fetchEvent(sibling.id);
        if (siblingDetails.flows_in.length > 0) {
          incoming = siblingDetails.flows_in[0];
          break;
        }
      }
    }
    if (!incoming || seen.has(incoming.event.id)) break;
    seen.add(incoming.event.id);
    upstream.unshift(link(incoming.event, incoming.category));
    current = await fetchEvent(incoming.event.id);
  }

  // Downstream: breadth first over outgoing flows and same-launch hardware events.
  const downstream: ChainLink[] = [];
  const queue: EventDetails[] = [start];
  for (let step = 0; queue.length > 0 && step < maxSteps; step++) {
    const node = queue.shift() as EventDetails;
    const next: ChainLink[] = node.flows_out.map((f) => link(f.event, f.category));
    if (node !== start || layerOf(start.lane_name) !== 'hardware') {
      for (const sibling of node.same_launch) next.push(link(sibling, 'launch'));
    }
    for (const candidate of next) {
      if (seen.has(candidate.event.id)) continue;
      seen.add(candidate.event.id);
      downstream.push(candidate);
      queue.push(await fetchEvent(candidate.event.id));
    }
  }
  downstream.sort((a, b) => LAYER_ORDER[a.layer] - LAYER_ORDER[b.layer] || a.event.ts - b.event.ts);
  return { selected: start, upstream, downstream };
}

// The hardware execution a chain leads to, if any: what the device timeline opens.
export function executionInChain(chain: Chain): EventSummary | undefined {
  const all = [link(chain.selected, 'selected'), ...chain.upstream, ...chain.downstream];
  return all.find((l) => l.event.name === 'nc_exec_running')?.event;
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
