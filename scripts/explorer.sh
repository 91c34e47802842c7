#!/usr/bin/env bash
# Installs the Explorer's npm dependencies (exactly package-lock.json, with `npm ci`) and builds the UI
# with Vite into explorer/dist, which `sightline serve` serves. Idempotent: npm ci runs again only when the
# lock file changed since the last install.
set -euo pipefail
explorer_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../explorer" && pwd)"
cd "$explorer_dir"

stamp=node_modules/.sightline-package-lock.sha256
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$lock_hash" ]]; then
  npm ci --no-audit --no-fund
  echo "$lock_hash" > "$stamp"
fi
npm run build
