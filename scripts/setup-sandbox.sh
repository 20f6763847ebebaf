#!/usr/bin/env bash
# Set up the grader's sandbox on this machine (SPEC §8, grader/sandbox/__init__.py). Idempotent: run it
# as often as you like; `make test` runs it before the tests.
#
#   * the system packages: bubblewrap (namespaces), libseccomp2 (seccomp filters), util-linux
#     (setpriv, which drops to the sandbox user inside bubblewrap);
#   * the sandbox users mutagrade-sandbox-0 .. mutagrade-sandbox-(N-1): system users with no
#     home, no login shell and a group of their own, one per worker running at once (a grading
#     runs two, and a grading process grades up to two per core at once). N is $SANDBOX_USERS, 8 per core
#     and 16 more by default.
#
#   scripts/setup-sandbox.sh [PYTHON]    # with PYTHON (the venv's), prints what doctor sees
#
# Needs root. Run as another user it changes nothing and says so: that user's gradings then
# give each worker a user namespace of its own instead of a sandbox user, where the kernel
# allows unprivileged user namespaces (the doctor's lines, printed with PYTHON, say whether it
# does); elsewhere grading untrusted code refuses to start (mode auto) until root has run it.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

SANDBOX_USERS="${SANDBOX_USERS:-$(( $(nproc) * 8 + 16 ))}"
PREFIX="mutagrade-sandbox-"
PYTHON="${1:-}"

have_libseccomp() {
    local lib
    for lib in /usr/lib/*/libseccomp.so.2 /usr/lib/libseccomp.so.2 /lib/*/libseccomp.so.2; do
        [ -e "$lib" ] && return 0
    done
    return 1
}

doctor() {
    if [ -n "$PYTHON" ] && [ -x "$PYTHON" ]; then
        "$PYTHON" -c 'from grader.sandbox.status import doctor_lines; print("\n".join(doctor_lines()))'
    fi
}

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-sandbox: not root (uid $(id -u)): the sandbox users are left as they are" >&2
    echo "setup-sandbox: each worker gets a user namespace of its own instead, where the kernel allows it;" \
        "elsewhere run 'sudo $0' once (until then untrusted grading refuses to start)" >&2
    doctor
    exit 0
fi

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
have_libseccomp || missing+=(libseccomp2)
if [ "${#missing[@]}" -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "setup-sandbox: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup-sandbox: please install ${missing[*]} (no apt-get here); the sandbox runs without them" >&2
    fi
fi

nologin="$(command -v nologin || echo /usr/sbin/nologin)"
made=0
for ((i = 0; i < SANDBOX_USERS; i++)); do
    name="${PREFIX}${i}"
    if ! id "$name" >/dev/null 2>&1; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell "$nologin" --comment "mutagrade sandbox (runs student code)" "$name"
        made=$((made + 1))
    fi
done
echo "setup-sandbox: ${SANDBOX_USERS} sandbox users (${made} new)"

doctor
