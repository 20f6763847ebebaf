#!/usr/bin/env bash
# Installs the system services the service's tests run for real: a PostgreSQL server, headless
# Chromium (with a font, so screenshots have text), and Redis (for the Celery queue); and the
# tools students pack and upload with, which the upload tests run: zip and curl.
#
# Idempotent: a package already installed is left alone, and when all are there apt is not
# touched at all (so `make test` costs nothing on a machine that has them). Quiet when it works;
# when apt fails, it prints apt's own output and exits non-zero, so `make test` stops there.
# Needs root (CI runs as root) only when something is missing.
set -euo pipefail

PACKAGES=(postgresql chromium redis-server fonts-dejavu-core zip curl)

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# What the tests call by path; checked every time, so a broken install fails here, not in a test.
check_binaries() {
    local binary
    for binary in /usr/lib/postgresql/15/bin/initdb /usr/lib/postgresql/15/bin/pg_ctl \
                  /usr/bin/chromium /usr/bin/redis-server /usr/bin/zip /usr/bin/curl; do
        if [ ! -x "$binary" ]; then
            echo "setup-services: $binary is missing although ${PACKAGES[*]} are installed" >&2
            exit 1
        fi
    done
}

missing=()
for package in "${PACKAGES[@]}"; do
    installed "$package" || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
    check_binaries
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-services: missing ${missing[*]}; run this script as root to install them" >&2
    exit 1
fi

log="$(mktemp -t setup-services.XXXXXX.log)"
policy=/usr/sbin/policy-rc.d
own_policy=0
cleanup() {
    # Only remove the policy file if this script wrote it.
    if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi
    rm -f "$log"
}
trap cleanup EXIT

# The tests start their own PostgreSQL and Redis on free ports; keep the packages' post-install
# scripts from starting system-wide daemons on 5432 and 6379 (exit 101: "action forbidden").
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    own_policy=1
fi

echo "setup-services: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup-services: apt-get failed to install ${missing[*]} (output above)" >&2
    exit 1
fi

for package in "${missing[@]}"; do
    if ! installed "$package"; then
        echo "setup-services: $package is still not installed after apt-get" >&2
        exit 1
    fi
done
check_binaries
