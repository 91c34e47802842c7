import { defineConfig } from 'vitest/config';

// The UI is served by `sightline serve` from explorer/dist; during `vite dev` the API is proxied to a
// server started separately on its default port. That server accepts only requests that name it
// (Host) and writes from its own origin, so the proxy presents them as the server's own; open the dev
// page with the server's token (http://127.0.0.1:5173/?token=... as `sightline serve` printed it).
export default defineConfig({
  base: './',
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: true },
  server: {
    host: '127.0.0.1',
    proxy: {
      '/api': {
        target: 'http://127.0.0.1:8600',
        changeOrigin: true,
        headers: { origin: 'http://127.0.0.1:8600' },
      },
    },
  },
  test: { include: ['tests/*.test.ts'], environment: 'node' },
});
