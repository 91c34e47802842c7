import { describe, expect, it } from 'vitest';
import { tokenFromPage } from '../src/api';

function memoryStorage() {
  const items = new Map<string, string>();
  return { getItem: (key: string) => items.get(key) ?? null, setItem: (key: string, value: string) => void items.set(key, value) };
}

describe('server token', () => {
  it('comes from the page URL that `sightline serve` printed and is kept for the tab', () => {
    const storage = memoryStorage();
    expect(tokenFromPage('?token=abc123', storage)).toBe('abc123');
    expect(tokenFromPage('', storage)).toBe('abc123'); // a reload or deep link without it
    expect(tokenFromPage('?token=def', storage)).toBe('def'); // a new server run
  });

  it('is absent when neither the URL nor the tab has one, and survives a storage that refuses', () => {
    expect(tokenFromPage('', memoryStorage())).toBeUndefined();
    expect(tokenFromPage('?other=1')).toBeUndefined();
    const refusing = {
      getItem: () => {
        throw new Error('denied');
      },
      setItem: () => {
        throw new Error('denied');
      },
    };
    expect(tokenFromPage('?token=xyz', refusing)).toBe('xyz');
    expect(tokenFromPage('', refusing)).toBeUndefined();
  });
});
