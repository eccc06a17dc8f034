#!/usr/bin/env bash
# Build drivers/go/cachemark-driver (the go-redis and gomemcache clients; docs/drivers.md).
# Idempotent: when nothing changed, go build leaves the binary alone (~0.2 s).
# GO names another go; by default the one on PATH, else /usr/local/go/bin/go.
set -euo pipefail
cd "$(dirname "$0")"
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
if ! command -v "$GO" >/dev/null 2>&1; then
    echo "go is not installed: install Go 1.26+ (https://go.dev/dl/), then make drivers" >&2
    exit 1
fi
if ! log=$("$GO" build -o cachemark-driver . 2>&1); then
    if printf '%s' "$log" | grep -qiE 'dial tcp|proxy|lookup|no such host|i/o timeout|connection refused|tls handshake'; then
        echo "go could not download the driver's modules (is the Go module proxy, $("$GO" env GOPROXY), reachable?): $(printf '%s' "$log" | tail -n 1)" >&2
    else
        printf '%s\n' "$log" | tail -n 5 >&2
    fi
    exit 1
fi
