// Stable colours by name: the same op gets the same colour in every view.

const PALETTE = [
  '#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f',
  '#5fa2ce', '#c85200', '#2f9e44', '#a3cce9', '#ffbc79', '#6b9ac4', '#d4a6c8',
];

export function hashString(text: string): number {
  let hash = 2166136261;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 16777619);
  }
  return hash >>> 0;
}

// Memoized: the timeline asks for every box of every frame, and a trace has few distinct names. The
// cache is bounded so a trace of unique names cannot grow it without limit.
const colorCache = new Map<string, string>();
const COLOR_CACHE_LIMIT = 4096;

export function colorFor(name: string): string {
  let color = colorCache.get(name);
  if (color === undefined) {
    color = PALETTE[hashString(name) % PALETTE.length];
    if (colorCache.size >= COLOR_CACHE_LIMIT) colorCache.clear();
    colorCache.set(name, color);
  }
  return color;
}

export const MERGED_COLOR = '#8a8f98';
