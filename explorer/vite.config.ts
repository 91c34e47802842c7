import { defineConfig } from 'vitest/config';

// The UI is served by `sightline serve` from explorer/dist; during `vite dev` the API is proxied to a
// server started separately on its default port.
export default defineConfig({
  base: './',
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: true },
  server: { host: '127.0.0.1', proxy: { '/api': 'http://127.0.0.1:8600' } },
  test: { include: ['tests/*.test.ts'], environment: 'node' },
});
