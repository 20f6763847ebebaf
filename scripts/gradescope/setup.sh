#!/usr/bin/env bash
# mutagrade's Gradescope autograder: its set-up, run once by Gradescope (as root, on its Ubuntu
# image) when the autograder is built. It installs:
#
#   * a Python 3.11 or newer: the image's own when it has one (Ubuntu 24.04: python3 is 3.12),
#     else CPython 3.11 installed by uv (Ubuntu 22.04: python3 is 3.10, and the image has no
#     python3.11). uv is the one on PATH, or one installed from PyPI into /opt/mutagrade/uv (a
#     venv of the image's python3); the interpreter goes into /opt/mutagrade/python, where the
#     sandbox users can run it;
#   * the mutagrade checkout in /opt/mutagrade/src: the copy in this bundle (mutagrade/ beside
#     this script), or a clone of the course's repository (the file `repository` beside this
#     script: its URL, then a branch or tag). assignment.toml beside this script, if there is
#     one, replaces the checkout's assignments/<name>/assignment.toml, of the assignment the
#     bundle grades (its folder's name: the file `assignment` beside this script, which
#     run_autograder reads too);
#   * a virtual environment /opt/mutagrade/venv with mutagrade installed editable from that
#     checkout (the grader finds its reference and mutants beside its code), and `mutagrade`
#     on PATH (/usr/local/bin) for run_autograder;
#   * the sandbox student code runs in: scripts/setup-sandbox.sh (bubblewrap and libseccomp
#     where the image allows them, the sandbox users); it prints what `mutagrade doctor` sees.
#
# `setup.sh --print-python` installs nothing: it prints the Python the set-up would use (its
# path), or `uv python install 3.11` when it would install one.
#
# Built by `mutagrade bundle gradescope`; MUTAGRADE_PREFIX replaces /opt/mutagrade.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the set-up too

UV_PYTHON="3.11"  # what uv installs where the image has no Python new enough

supported_python() {  # the first Python 3.11 or newer on PATH, by its path; status 1 if none
    local candidate
    for candidate in python3.14 python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

if [ "${1:-}" = "--print-python" ]; then
    supported_python || echo "uv python install $UV_PYTHON"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${MUTAGRADE_PREFIX:-/opt/mutagrade}"
SRC="$PREFIX/src"
VENV="$PREFIX/venv"

apt_install() {  # prints nothing on stdout: uv_python's is the interpreter's path
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

with_venv_module() {  # $1 (a Python) can make a venv: the image's pythonX.Y-venv where it cannot
    local version
    version="$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    "$1" -c 'import ensurepip, venv' 2>/dev/null || apt_install "python${version}-venv"
}

uv_python() {  # CPython $UV_PYTHON installed by uv under $PREFIX/python; prints its path
    local uv boot
    uv="$(command -v uv || true)"
    if [ -z "$uv" ]; then
        boot="$(command -v python3 || true)"
        if [ -z "$boot" ]; then
            apt_install python3
            boot="$(command -v python3)"
        fi
        with_venv_module "$boot"
        "$boot" -m venv "$PREFIX/uv"
        "$PREFIX/uv/bin/python" -m pip install --quiet uv >&2
        uv="$PREFIX/uv/bin/uv"
    fi
    UV_PYTHON_INSTALL_DIR="$PREFIX/python" UV_PYTHON_BIN_DIR="$PREFIX/python/bin" \
        "$uv" python install "$UV_PYTHON" >&2
    chmod -R go-w,a+rX "$PREFIX/python"  # the sandbox users run it
    # The one just installed: no virtual environment (VIRTUAL_ENV, a .venv above) is looked at.
    (cd "$PREFIX/python" && unset VIRTUAL_ENV \
        && UV_PYTHON_INSTALL_DIR="$PREFIX/python" UV_PYTHON_PREFERENCE=only-managed "$uv" python find "$UV_PYTHON")
}

mkdir -p "$PREFIX"
python="$(supported_python || true)"
if [ -z "$python" ]; then
    python="$(uv_python)"
fi
with_venv_module "$python"
version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
echo "setup.sh: Python $version ($python)"

rm -rf "$SRC"
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
    assignment="$(head -n 1 "$HERE/assignment" 2>/dev/null || true)"
    case "$assignment" in
        "" | .* | */*)
            echo "setup.sh: assignment.toml beside this script, but no assignment named in the file assignment: rebuild the bundle" >&2
            exit 1 ;;
    esac
    if [ ! -f "$SRC/assignments/$assignment/assignment.toml" ]; then
        echo "setup.sh: the checkout has no assignment $assignment (assignments/$assignment/assignment.toml)" >&2
        exit 1
    fi
    cp "$HERE/assignment.toml" "$SRC/assignments/$assignment/assignment.toml"
fi
chmod -R go-w,a+rX "$SRC"

"$python" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e "$SRC"
ln -sf "$VENV/bin/mutagrade" /usr/local/bin/mutagrade
# Compiled here once: the sandbox users cannot write __pycache__ in the checkout.
(cd "$SRC" && "$VENV/bin/python" -m compileall -q -x 'reference/tinyllm/rnn/(gru|lstm)\.py' grader api reference >/dev/null)
bash "$SRC/scripts/setup-sandbox.sh" "$VENV/bin/python"
ready="$("$VENV/bin/mutagrade" --version)"
echo "setup.sh: $ready ready"
