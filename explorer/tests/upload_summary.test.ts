import { describe, expect, it } from 'vitest';
import { errorMessage, type Insight, type SummaryAnswer } from '../src/api';
import { FrameLog } from '../src/frames';
import { engineBars, formatMetric, formatSi, intensityVerdict, rankInsights } from '../src/summary_data';
import { planDirectoryUpload, planPairUpload, profileNameError, progressText, suggestName } from '../src/upload';
import { formatBytes } from '../src/device_summary';

const inFolder = (folder: string, names: string[]) =>
  names.map((name) => ({ name, size: 1000, webkitRelativePath: `${folder}/${name}` }));

describe('upload file lists', () => {
  it('accepts a profile directory and names the upload after the folder', () => {
    const plan = planDirectoryUpload(inFolder('fused run', ['manifest.json', 'trace.json', 'neff_7daf.neff']));
    expect(plan).toMatchObject({ ok: true, kind: 'directory', bytes: 3000, suggestedName: 'fused_run' });
  });

  it('rejects folders without a manifest, with subfolders, or empty', () => {
    const noManifest = planDirectoryUpload(inFolder('x', ['trace.json']));
    expect(noManifest.ok).toBe(false);
    if (!noManifest.ok) expect(noManifest.error).toMatch(/no manifest\.json/);
    const nested = planDirectoryUpload([
      { name: 'manifest.json', size: 1, webkitRelativePath: 'all/naive/manifest.json' },
    ]);
    if (nested.ok) throw new Error('a folder of profiles must be refused');
    expect(nested.error).toMatch(/subfolders/);
    const empty = planDirectoryUpload([]);
    expect(empty.ok).toBe(false);
  });

  it('accepts exactly one .neff and one .ntff', () => {
    const pair = planPairUpload([{ name: 'neff_3311.neff', size: 10 }, { name: '3311_instid_0_vnc_0.ntff', size: 20 }]);
    expect(pair).toMatchObject({ ok: true, kind: 'pair', bytes: 30, suggestedName: '3311' });
    const two = planPairUpload([{ name: 'a.neff', size: 1 }, { name: 'b.neff', size: 1 }]);
    if (two.ok) throw new Error('two executables must be refused');
    expect(two.error).toContain('got 2 .neff and 0 .ntff');
    const other = planPairUpload([{ name: 'a.neff', size: 1 }, { name: 'trace.json', size: 1 }]);
    if (other.ok) throw new Error('a json file is not part of a pair');
    expect(other.error).toContain("'trace.json'");
  });

  it('checks names as the server does', () => {
    expect(profileNameError('fused-2@x+y.z')).toBeUndefined();
    expect(profileNameError('')).toMatch(/Enter a name/);
    expect(profileNameError('.hidden')).toMatch(/dot/);
    expect(profileNameError('a/b')).toMatch(/letters, digits/);
    expect(profileNameError('x'.repeat(201))).toMatch(/at most 200/);
    expect(suggestName('..my run')).toBe('my_run');
    expect(suggestName('')).toBe('profile');
    expect(progressText(512, 2048, formatBytes)).toBe('512 B of 2.0 KiB (25%)');
    expect(progressText(512, 0, formatBytes)).toBe('512 B sent');
  });
});

const summary = (metrics: Record<string, unknown>): SummaryAnswer => ({
  insights: [], roofline: { peak_flops_per_s: 1, hbm_bytes_per_s: 1, ridge_point: 1, points: [] }, ...metrics,
});

describe('summary formatting', () => {
  it('formats metrics with units', () => {
    expect(formatMetric(82.08, 'us')).toBe('82.080 us');
    expect(formatMetric(29.157, 'percent')).toBe('29.2 %');
    expect(formatMetric(0.01626, 'percent')).toBe('0.016 %');
    expect(formatMetric(5511680, 'bytes')).toBe('5.26 MiB');
    expect(formatMetric(98497, 'count')).toBe('98,497');
    expect(formatMetric(0.12115, 'flop_per_byte')).toBe('0.121 FLOP/B');
    expect(formatMetric(217.25, 'flop_per_byte')).toBe('217 FLOP/B');
    expect(formatMetric(78.6432, 'text', 'tensor_engine_peak_tflops')).toBe('78.6 TFLOP/s');
    expect(formatMetric('memory-bound', 'text')).toBe('memory-bound');
    expect(formatMetric(undefined, 'us')).toBe('—');
    expect(formatSi(1049600, 'FLOP')).toBe('1.05 MFLOP');
  });

  it('lists the engines present, clamped to 0..100 %', () => {
    const bars = engineBars(summary({
      tensor_engine_active_time_percent: 0, vector_engine_active_time_percent: 13.09, vector_engine_active_time_us: 10.7,
      dma_engine_active_time_percent: 100.0000001,
    }));
    expect(bars.map((b) => b.label)).toEqual(['Tensor', 'Vector', 'DMA']);
    expect(bars[1]).toMatchObject({ percent: 13.09, activeUs: 10.7 });
    expect(bars[2].percent).toBe(100);
  });

  it('places the intensity against the ridge point', () => {
    const memory = intensityVerdict(summary({ model_arithmetic_intensity: 0.121, peak_flops_bandwidth_ratio: 217.2 }));
    expect(memory.bound).toBe('memory-bound');
    expect(memory.text).toContain('0.121 FLOP/B is 1,795x below the ridge point (217 FLOP/B)');
    const compute = intensityVerdict(summary({ model_arithmetic_intensity: 434.4, peak_flops_bandwidth_ratio: 217.2 }));
    expect(compute.bound).toBe('compute-bound');
    expect(compute.text).toContain('2x above');
    expect(intensityVerdict(summary({})).bound).toBe('unknown');
  });

  it('ranks insights by potential saving, keeping the server order for ties', () => {
    const insight = (id: string, saving: number): Insight => ({ id, title: id, evidence: '', fix: '', potential_saving_us: saving });
    expect(rankInsights([insight('small_dma', 10.7), insight('idle_gaps', 459.8), insight('tiny', 250), insight('x', 250)])
      .map((i) => i.id)).toEqual(['idle_gaps', 'tiny', 'x', 'small_dma']);
  });
});

describe('frame log', () => {
  it('keeps the latest frames in order and remembers the first complete one', () => {
    const log = new FrameLog(3);
    for (let i = 0; i < 5; i++) log.add({ at: i, drawMs: 1, complete: i >= 1, boxes: i });
    expect(log.frames().map((f) => f.at)).toEqual([2, 3, 4]);
    expect(log.firstComplete?.at).toBe(1);
    log.clear();
    expect(log.frames()).toEqual([]);
    expect(() => new FrameLog(0)).toThrow(/positive capacity/);
  });
});

describe('server error messages', () => {
  it("shows the server's {error} text, or says what came back instead", () => {
    expect(errorMessage('/api/profiles?name=x', 409, '{"error":"a profile named \'x\' already exists"}'))
      .toBe("a profile named 'x' already exists");
    expect(errorMessage('/api/profiles?name=x', 413, '')).toBe('/api/profiles?name=x: the server answered HTTP 413');
    expect(errorMessage('/api/compare', 502, '<html>Bad gateway</html>'))
      .toBe('/api/compare: the server answered HTTP 502 (<html>Bad gateway</html>)');
  });
});

describe('human units in insight text', () => {
  it('rewrites large raw figures, leaves small ones and counts', async () => {
    const { humanizeText } = await import('../src/summary_data');
    expect(humanizeText('6 executions span 1238945344.3 us; idle for 341.3 us')).toBe('6 executions span 1238.945 s; idle for 341.3 us');
    expect(humanizeText('151 transfers move 1182724 bytes (target >= 32768)')).toBe('151 transfers move 1.13 MiB (target >= 32768)');
    expect(humanizeText('average 7833 bytes, 512 bytes')).toBe('average 7.6 KiB, 512 bytes');
  });
});
