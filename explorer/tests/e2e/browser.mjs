// Headless Debian chromium through playwright-core, as the end-to-end test and the browser benchmark
// (bench/explorer/frame_bench.mjs) drive it: a throwaway profile directory, a fixed viewport, device
// scale 1 and no background traffic. SIGHTLINE_CHROMIUM overrides the chromium binary.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const VIEWPORT = { width: 1600, height: 1000 };

// Returns the browser context and a close() that also removes its profile directory.
export async function launchBrowser(prefix) {
  const userData = mkdtempSync(join(tmpdir(), `${prefix}-chromium-`));
  const context = await chromium.launchPersistentContext(userData, {
    executablePath: process.env.SIGHTLINE_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    viewport: VIEWPORT,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--force-device-scale-factor=1'],
  });
  const close = async () => {
    await context.close();
    rmSync(userData, { recursive: true, force: true });
  };
  return { context, close };
}
