// Deep links: #/ lists profiles; #/p/<name>?start=&end=&sel= opens a profile at a time range with an
// event selected.

export interface Route {
  profile?: string;
  start?: number;
  end?: number;
  selected?: number;
}

export function parseRoute(hash: string): Route {
  const body = hash.replace(/^#/, '');
  const match = /^\/p\/([^?]+)(?:\?(.*))?$/.exec(body);
  if (!match) return {};
  const route: Route = { profile: decodeURIComponent(match[1]) };
  const query = new URLSearchParams(match[2] ?? '');
  const number = (key: string) => {
    const text = query.get(key);
    if (text === null || text === '') return undefined;
    const value = Number(text);
    return Number.isFinite(value) ? value : undefined;
  };
  route.start = number('start');
  route.end = number('end');
  route.selected = number('sel');
  if (route.start !== undefined && route.end !== undefined && !(route.end > route.start)) {
    route.start = undefined;
    route.end = undefined;
  }
  return route;
}

export function formatRoute(route: Route): string {
  if (!route.profile) return '#/';
  const query = new URLSearchParams();
  if (route.start !== undefined && route.end !== undefined) {
    query.set('start', route.start.toFixed(3));
    query.set('end', route.end.toFixed(3));
  }
  if (route.selected !== undefined) query.set('sel', String(route.selected));
  const text = query.toString();
  return `#/p/${encodeURIComponent(route.profile)}${text ? `?${text}` : ''}`;
}
