// Headless Debian chromium through playwright-core, as the end-to-end test and the browser benchmark
// (bench/explorer/frame_bench.mjs) drive it: a throwaway profile directory, a fixed viewport, device
// scale 1 and no background traffic. SIGHTLINE_CHROMIUM overrides the chromium binary.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

// Where the end-to-end tests write their screenshots (explorer/test-results), created on first use.
export function resultsDir() {
  const dir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-results');
  mkdirSync(dir, { recursive: true });
  return dir;
}

// One checked behaviour of an end-to-end test: throws with the message when it does not hold.
export function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
  console.log(`ok - ${message}`);
}

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
