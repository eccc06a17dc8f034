#!/usr/bin/env bash
# Make sure the given Debian packages are installed.
# As root on Debian: apt-get installs what is missing (one `apt-get update` first).
# Elsewhere: one line saying what to install, and success — tests skip what is absent.
set -euo pipefail
missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian starts services on install where it can; cachemark spawns its own private servers.
    for svc in redis-server memcached postgresql mariadb; do
        (service "$svc" stop >/dev/null 2>&1 || true)
    done
else
    echo "cachemark: please install: ${missing[*]} (e.g. sudo apt-get install ${missing[*]}); continuing without them"
fi
