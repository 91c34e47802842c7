// The first view of a large profile (src/server/profile_index.h): the server answers from the first
// part of trace.json while it indexes the whole file, and says so in each answer. What the indicator
// reads, and how a view carries over to the complete index.

import type { IndexProgress } from './api';
import { formatBytes } from './device_summary';
import type { Viewport } from './timeline_math';

export const INDEX_COMPLETE_MARK = 'sightline:index-complete';

// The indicator's text: how far the whole file is indexed, and what is on screen meanwhile.
export function indexingText(progress: IndexProgress | undefined): string {
  if (!progress) return 'Indexing the trace: showing its first part until the whole trace is indexed';
  const fraction = Math.min(1, Math.max(0, progress.fraction));
  return `Indexing trace.json: ${Math.floor(fraction * 100)}% of ${formatBytes(progress.trace_bytes)} read; ` +
    `showing its first ${formatBytes(progress.first_view_bytes)} until the whole trace is indexed`;
}

// Times in answers are relative to the profile's earliest event. The complete index may find an
// earlier one than the first part held: the same instants, relative to the new origin.
export function shiftView(view: Viewport, fromOriginUs: number | undefined, toOriginUs: number | undefined): Viewport {
  if (fromOriginUs === undefined || toOriginUs === undefined) return view;
  const shift = fromOriginUs - toOriginUs;
  return { start: view.start + shift, end: view.end + shift };
}
