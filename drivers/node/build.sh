#!/usr/bin/env bash
# Installs the Node driver's clients (ioredis, node-redis, memjs) at the versions pinned in
# package-lock.json into drivers/node/node_modules. Quick when they are already there;
# one line saying what is missing when node/npm are absent or the registry is unreachable.
set -uo pipefail
cd "$(dirname "$0")"
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "node driver: $tool is not installed (install Node.js 20+ and npm, e.g. apt-get install nodejs npm)" >&2
        exit 1
    fi
done
# npm ci wipes and reinstalls node_modules: skip it while node_modules was installed from this very lock file.
stamp=node_modules/.cachemark-package-lock.json
if cmp -s package-lock.json "$stamp"; then
    exit 0
fi
# Quiet unless it fails (--loglevel=error rather than --silent, which would hide the reason too);
# shorter retry back-off than npm's default (10-60 s), so an unreachable registry fails in seconds.
if ! out=$(npm ci --no-audit --no-fund --loglevel=error --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 2>&1); then
    reason=$(printf '%s' "$out" | grep -v -i '^npm warn' | grep -v 'A complete log' | grep -v '^\s*$' | head -n 3 | tr '\n' ' ')
    echo "node driver: npm ci failed (is the npm registry reachable?): ${reason:-no reason given}" >&2
    exit 1
fi
cp package-lock.json "$stamp"
