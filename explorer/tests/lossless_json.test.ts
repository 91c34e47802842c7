import { describe, expect, it } from 'vitest';
import { parseJsonLossless, stringifyLossless } from '../src/lossless_json';

describe('parseJsonLossless', () => {
  it('keeps 64-bit correlation ids exact', () => {
    const value = parseJsonLossless('{"args":{"correlation":4611686018427387949,"device":0}}') as
      { args: { correlation: unknown; device: unknown } };
    expect(value.args.correlation).toBe(4611686018427387949n);
    expect(value.args.device).toBe(0);
    expect(stringifyLossless(value.args.correlation)).toBe('4611686018427387949');
  });

  it('leaves safe integers, floats, negatives and strings alone', () => {
    const text = '{"a":9007199254740991,"b":1234567890123456.5,"c":-9223372036854775807,"d":"12345678901234567890",' +
      '"e":[1e300,"x\\"9999999999999999999"],"f":12345678901234567e2}';
    const value = parseJsonLossless(text) as Record<string, unknown>;
    expect(value.a).toBe(9007199254740991);
    expect(value.b).toBe(1234567890123456.5);
    expect(value.c).toBe(-9223372036854775807n);
    expect(value.d).toBe('12345678901234567890');
    expect(value.e).toEqual([1e300, 'x"9999999999999999999']);
    expect(value.f).toBe(12345678901234567e2);
  });

  it('writes BigInts back as bare integers', () => {
    expect(stringifyLossless({ id: 18446744073709551615n, name: 'x' })).toBe('{"id":18446744073709551615,"name":"x"}');
  });
});
