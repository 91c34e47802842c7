// JSON.parse that keeps 64-bit integers exact. The server writes ids such as the profiler's correlation
// ids (top bits set: 4611686018427387949) as plain JSON numbers, which JSON.parse rounds to the nearest
// double (4611686018427388000). Integers beyond Number.MAX_SAFE_INTEGER come back as BigInt; every other
// value is what JSON.parse gives.

const MARK = '\u0000bigint:';

// Integer literals of 16 or more digits outside strings; only those can be beyond 2^53.
function quoteLongIntegers(text: string): string {
  let out = '';
  let last = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      for (i++; i < n; i++) {
        const d = text.charCodeAt(i);
        if (d === 92 /* \ */) i++;
        else if (d === 34) break;
      }
      i++;
      continue;
    }
    if (c === 45 /* - */ || (c >= 48 && c <= 57)) {
      const begin = i;
      if (c === 45) i++;
      while (i < n && text.charCodeAt(i) >= 48 && text.charCodeAt(i) <= 57) i++;
      const digitsEnd = i;
      const next = i < n ? text.charCodeAt(i) : 0;
      const fractional = next === 46 /* . */ || next === 101 /* e */ || next === 69 /* E */;
      while (i < n && /[0-9.eE+-]/.test(text[i])) i++;
      const digits = digitsEnd - begin - (c === 45 ? 1 : 0);
      if (!fractional && digits >= 16) {
        const literal = text.slice(begin, digitsEnd);
        if (!Number.isSafeInteger(Number(literal))) {
          out += `${text.slice(last, begin)}"\\u0000bigint:${literal}"`; // MARK, escaped as JSON text
          last = digitsEnd;
        }
      }
      continue;
    }
    i++;
  }
  return last === 0 ? text : out + text.slice(last);
}

export function parseJsonLossless(text: string): unknown {
  // Fast path: without a run of 16 digits there is nothing to keep.
  if (!/\d{16}/.test(text)) return JSON.parse(text);
  return JSON.parse(quoteLongIntegers(text), (_key, value: unknown) =>
    typeof value === 'string' && value.startsWith(MARK) ? BigInt(value.slice(MARK.length)) : value);
}

// JSON text of a value that may hold BigInts (written as the exact integer).
export function stringifyLossless(value: unknown): string {
  const marked = JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? `${MARK}${v}` : v));
  if (marked === undefined) return String(value);
  return marked.replace(/"\\u0000bigint:(-?\d+)"/g, '$1');
}
