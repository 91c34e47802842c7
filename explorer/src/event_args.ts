// The Selection panel's args list: each arg of the selected event as a <dt>/<dd> pair. An op
// recorded with with_stack carries "Call stack" (an array of "file(line): function" frames, innermost
// first, docs/formats.md): it is shown as a list, the op's own call site first, each frame on a line.
import { escapeHtml } from './html';
import { stringifyLossless } from './lossless_json';

export function argsHtml(args: Record<string, unknown>): string {
  return Object.entries(args)
    .map(([key, value]) => `<dt>${escapeHtml(key)}</dt><dd data-arg="${escapeHtml(key)}">${argValueHtml(key, value)}</dd>`)
    .join('');
}

function argValueHtml(key: string, value: unknown): string {
  if (key === 'Call stack' && Array.isArray(value) && value.every((frame) => typeof frame === 'string')) {
    const frames = value.map((frame) => `<li>${escapeHtml(frame)}</li>`).join('');
    return `<ol class="call-stack" data-testid="call-stack">${frames}</ol>`;
  }
  return escapeHtml(stringifyLossless(value));
}
