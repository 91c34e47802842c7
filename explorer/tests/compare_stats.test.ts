import { describe, expect, it } from 'vitest';
import { executionStats } from '../src/compare';

describe('execution stats for compare', () => {
  it('gives span, busy time and the idle gaps between executions', () => {
    const stats = executionStats([{ ts: 100, dur: 5 }, { ts: 10, dur: 10 }, { ts: 15, dur: 10 }, { ts: 60, dur: 2 }]);
    expect(stats).toEqual({ count: 4, busyUs: 15 + 2 + 5, spanUs: 95, idleUs: 95 - 22, largestGapUs: 38 });
  });

  it('is all zero without executions', () => {
    expect(executionStats([])).toEqual({ count: 0, busyUs: 0, spanUs: 0, idleUs: 0, largestGapUs: 0 });
  });
});
