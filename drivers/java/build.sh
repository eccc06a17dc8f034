#!/usr/bin/env bash
# Build the Java driver: target/cachemark-driver.jar (one runnable jar with Jedis, Lettuce and
# spymemcached). Run by scripts/build-drivers.sh (make setup / make drivers). Quick when the jar
# is newer than its sources; offline when Maven's local repository already has everything.
set -uo pipefail
cd "$(dirname "$0")"
jar=target/cachemark-driver.jar

for tool in java mvn; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "the Java driver needs $tool: install a JDK (17+) and Maven (Debian: apt-get install openjdk-17-jdk-headless maven)" >&2
        exit 1
    fi
done

if [[ -f $jar && -z $(find pom.xml build.sh src -newer "$jar" -print -quit) ]]; then
    exit 0 # up to date
fi

if mvn -q -B -o package -DskipTests >/dev/null 2>&1; then
    exit 0
fi
# something is not in the local repository yet: fetch it from Maven Central (once)
if out=$(mvn -q -B package -DskipTests 2>&1); then
    exit 0
fi
if grep -qiE "could not (transfer|resolve)|unknown ?host|connect(ion)? (refused|timed out)|network is unreachable|UnknownHostException" <<<"$out"; then
    echo "the Java driver did not build: Maven Central is unreachable (the first build fetches the clients from it)" >&2
else
    grep -E "ERROR|error:" <<<"$out" | head -n 5 >&2
    echo "the Java driver did not build (mvn package failed)" >&2
fi
exit 1
