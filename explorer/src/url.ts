// Deep links: #/ lists profiles; #/p/<name>?start=&end=&sel=&tab= opens a profile at a time range with
// an event selected and a tab shown (timeline when absent); #/compare?a=&b=&start=&end= compares two
// profiles with the stacked timelines at a range of the shared axis (microseconds from each start).

export const TABS = ['timeline', 'operators', 'summary', 'roofline'] as const;
export type Tab = (typeof TABS)[number];

export interface Route {
  profile?: string;
  start?: number;
  end?: number;
  selected?: number;
  tab?: Tab;
  compare?: { a?: string; b?: string };
}

function numberParam(query: URLSearchParams, key: string): number | undefined {
  const text = query.get(key);
  if (text === null || text === '') return undefined;
  const value = Number(text);
  return Number.isFinite(value) ? value : undefined;
}

function setRange(route: Route, query: URLSearchParams): void {
  route.start = numberParam(query, 'start');
  route.end = numberParam(query, 'end');
  if (route.start !== undefined && route.end !== undefined && !(route.end > route.start)) {
    route.start = undefined;
    route.end = undefined;
  }
}

export function parseRoute(hash: string): Route {
  const body = hash.replace(/^#/, '');
  const compare = /^\/compare(?:\?(.*))?$/.exec(body);
  if (compare) {
    const query = new URLSearchParams(compare[1] ?? '');
    const route: Route = { compare: { a: query.get('a') || undefined, b: query.get('b') || undefined } };
    setRange(route, query);
    return route;
  }
  const match = /^\/p\/([^?]+)(?:\?(.*))?$/.exec(body);
  if (!match) return {};
  const route: Route = { profile: decodeURIComponent(match[1]) };
  const query = new URLSearchParams(match[2] ?? '');
  setRange(route, query);
  route.selected = numberParam(query, 'sel');
  const tab = query.get('tab');
  if (tab !== null && (TABS as readonly string[]).includes(tab) && tab !== 'timeline') route.tab = tab as Tab;
  return route;
}

export function formatRoute(route: Route): string {
  const query = new URLSearchParams();
  if (route.compare) {
    if (route.compare.a) query.set('a', route.compare.a);
    if (route.compare.b) query.set('b', route.compare.b);
  }
  if (route.start !== undefined && route.end !== undefined) {
    query.set('start', route.start.toFixed(3));
    query.set('end', route.end.toFixed(3));
  }
  if (route.compare) {
    const text = query.toString();
    return `#/compare${text ? `?${text}` : ''}`;
  }
  if (!route.profile) return '#/';
  if (route.selected !== undefined) query.set('sel', String(route.selected));
  if (route.tab && route.tab !== 'timeline') query.set('tab', route.tab);
  const text = query.toString();
  return `#/p/${encodeURIComponent(route.profile)}${text ? `?${text}` : ''}`;
}
