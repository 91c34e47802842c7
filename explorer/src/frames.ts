// Frame log of the system timeline, for the benchmark (bench/explorer/frame_bench.mjs) and for
// debugging: every draw records when it ran, how long it took and whether it showed data for the whole
// view ("complete": the data on screen covers the visible window at the current zoom). The first
// complete draw also sets the performance mark FIRST_FRAME_MARK. A ring buffer, so a long session
// keeps only the latest frames.

export interface FrameRecord {
  at: number; // performance.now() when the draw started, ms
  drawMs: number; // time spent in draw()
  complete: boolean;
  boxes: number; // boxes drawn
}

export const FIRST_FRAME_MARK = 'sightline:first-complete-frame';

export class FrameLog {
  private readonly records: FrameRecord[] = [];
  private next = 0;
  firstComplete?: FrameRecord;

  constructor(readonly capacity = 1000) {
    if (!(capacity > 0)) throw new Error(`a frame log needs a positive capacity, got ${capacity}`);
  }

  add(record: FrameRecord): void {
    if (this.records.length < this.capacity) this.records.push(record);
    else this.records[this.next] = record;
    this.next = (this.next + 1) % this.capacity;
    if (record.complete && !this.firstComplete) this.firstComplete = record;
  }

  // Oldest first.
  frames(): FrameRecord[] {
    if (this.records.length < this.capacity) return [...this.records];
    return [...this.records.slice(this.next), ...this.records.slice(0, this.next)];
  }

  clear(): void {
    this.records.length = 0;
    this.next = 0;
    this.firstComplete = undefined;
  }
}

export const frameLog = new FrameLog();

export function recordFrame(record: FrameRecord): void {
  const first = !frameLog.firstComplete && record.complete;
  frameLog.add(record);
  if (first && typeof performance !== 'undefined' && typeof performance.mark === 'function') {
    performance.mark(FIRST_FRAME_MARK, { startTime: record.at + record.drawMs });
  }
}
