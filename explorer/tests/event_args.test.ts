import { describe, expect, it } from 'vitest';
import { argsHtml } from '../src/event_args';

describe('argsHtml', () => {
  it('shows a call stack as a list of frames, innermost first', () => {
    const html = argsHtml({ 'Call stack': ['model.py(12): forward', 'main.py(40): <module>'] });
    expect(html).toBe(
      '<dt>Call stack</dt><dd data-arg="Call stack"><ol class="call-stack" data-testid="call-stack">' +
        '<li>model.py(12): forward</li><li>main.py(40): &lt;module&gt;</li></ol></dd>',
    );
  });

  it('escapes every other arg as its JSON text, 64-bit ids exactly', () => {
    const html = argsHtml({ 'External id': 4611686018427387905n, name: '<b>' });
    expect(html).toContain('<dd data-arg="External id">4611686018427387905</dd>');
    expect(html).toContain('<dd data-arg="name">&quot;&lt;b&gt;&quot;</dd>');
  });

  it('keeps a Call stack that is not an array of strings as text', () => {
    expect(argsHtml({ 'Call stack': 'a;b' })).toBe('<dt>Call stack</dt><dd data-arg="Call stack">&quot;a;b&quot;</dd>');
  });
});
