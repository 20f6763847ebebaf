#!/usr/bin/env bash
# mutagrade's Gradescope autograder: its set-up, run once by Gradescope (as root, on its Ubuntu
# image) when the autograder is built. It installs:
#
#   * a Python 3.11 or newer: the image's, or python3.11 from apt;
#   * the mutagrade checkout in /opt/mutagrade/src: the copy in this bundle (mutagrade/ beside
#     this script), or a clone of the course's repository (the file `repository` beside this
#     script: its URL, then a branch or tag). assignment.toml beside this script, if there is
#     one, replaces the checkout's mutants/assignment.toml;
#   * a virtual environment /opt/mutagrade/venv with mutagrade installed editable from that
#     checkout (the grader finds its reference and mutants beside its code), and `mutagrade`
#     on PATH (/usr/local/bin) for run_autograder;
#   * the sandbox student code runs in: scripts/setup-sandbox.sh (bubblewrap and libseccomp
#     where the image allows them, the sandbox users); it prints what `mutagrade doctor` sees.
#
# Built by `mutagrade bundle gradescope`; MUTAGRADE_PREFIX replaces /opt/mutagrade.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${MUTAGRADE_PREFIX:-/opt/mutagrade}"
SRC="$PREFIX/src"
VENV="$PREFIX/venv"

apt_install() {
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

python=""
for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
        && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        python="$(command -v "$candidate")"
        break
    fi
done
if [ -z "$python" ]; then
    apt_install python3.11 python3.11-venv
    python="$(command -v python3.11)"
fi
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
"$python" -c 'import ensurepip, venv' 2>/dev/null || apt_install "python${version}-venv"
echo "setup.sh: Python $version ($python)"

rm -rf "$SRC"
mkdir -p "$PREFIX"
if [ -d "$HERE/mutagrade" ]; then
    cp -R "$HERE/mutagrade" "$SRC"
elif [ -f "$HERE/repository" ]; then
    { IFS= read -r url; IFS= read -r ref || true; } < "$HERE/repository"
    command -v git >/dev/null 2>&1 || apt_install git ca-certificates
    git clone --quiet --depth 1 ${ref:+--branch "$ref"} -- "$url" "$SRC"
    echo "setup.sh: cloned $url${ref:+ at $ref}"
else
    echo "setup.sh: neither mutagrade/ nor repository beside this script: rebuild the bundle" >&2
    exit 1
fi
if [ -f "$HERE/assignment.toml" ]; then
    cp "$HERE/assignment.toml" "$SRC/mutants/assignment.toml"
fi
chmod -R go-w,a+rX "$SRC"

"$python" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e "$SRC"
ln -sf "$VENV/bin/mutagrade" /usr/local/bin/mutagrade
# Compiled here once: the sandbox users cannot write __pycache__ in the checkout.
(cd "$SRC" && "$VENV/bin/python" -m compileall -q -x 'reference/tinyllm/rnn/gru\.py' grader api reference >/dev/null)
bash "$SRC/scripts/setup-sandbox.sh" "$VENV/bin/python"
echo "setup.sh: $("$VENV/bin/mutagrade" --version) ready"
