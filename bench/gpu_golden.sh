#!/usr/bin/env bash
# Live torch comparisons on a GPU: `mutagrade golden --device cuda --throughput N` (what a gpu
# worker runs), then the figures on their own lines:
#
#   cases_per_s: ...     batched random cases compared per second (torch on DEVICE against the
#                        assignment's reference module in float64, both run)
#   max_deviation: ...   the largest deviation of torch from the float64 reference over those
#                        cases (relative to each array's scale in float32; absolute in float64)
#
#   bash bench/gpu_golden.sh                      # DEVICE=cuda (float32), N=8192 cases
#   DEVICE=cpu N=256 bash bench/gpu_golden.sh     # the same on the CPU (float64): runs anywhere
#   bash bench/gpu_golden.sh --assignment l3-2-lstm   # another module of the course (default:
#                                                     # assignments/course.toml's)
#
# Settings (environment): DEVICE (cuda, cuda:1, cpu), N (cases), BATCH (cases per batch),
# VENV (default .venv), PYTHON (to make the venv, default python3). If VENV lacks mutagrade or
# torch, the project is installed into it with the torch extra (PyPI's torch carries CUDA).
# Exit 0 when every variant is judged as the manifest says and the deviation is within the
# tolerance (1e-4 relative in float32, 1e-10 in float64); 1 when not; 2 when it cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."

ASSIGNMENT=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --assignment) [ "$#" -ge 2 ] || { echo "gpu_golden: --assignment needs a NAME" >&2; exit 2; }
                      ASSIGNMENT=(--assignment "$2"); shift 2 ;;
        --assignment=*) ASSIGNMENT=(--assignment "${1#--assignment=}"); shift ;;
        *) echo "gpu_golden: unknown argument $1 (expected --assignment NAME)" >&2; exit 2 ;;
    esac
done

DEVICE="${DEVICE:-cuda}"
N="${N:-8192}"
BATCH="${BATCH:-256}"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

if ! [[ "$N" =~ ^[1-9][0-9]*$ && "$BATCH" =~ ^[1-9][0-9]*$ ]]; then
    echo "gpu_golden: N and BATCH must be positive integers (got N=$N, BATCH=$BATCH)" >&2
    exit 2
fi

# Install only what is missing: a venv with mutagrade and torch is used as it is.
if ! { [ -x "$VENV/bin/mutagrade" ] && "$VENV/bin/python" -c "import torch" 2>/dev/null; }; then
    echo "gpu_golden: installing mutagrade with torch into $VENV" >&2
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e '.[torch]'
fi

# Refuse, rather than fail half-way, when the device is not there.
if ! "$VENV/bin/python" - "$DEVICE" <<'EOF'
import sys

import torch

device = sys.argv[1]
if device.startswith("cuda"):
    if not torch.cuda.is_available():
        sys.exit(f"gpu_golden: torch {torch.__version__} sees no CUDA device (DEVICE=cpu runs on the CPU)")
    index = torch.device(device).index or 0
    if index >= torch.cuda.device_count():
        sys.exit(f"gpu_golden: {device}: only {torch.cuda.device_count()} CUDA device(s)")
    print(f"gpu_golden: torch {torch.__version__} on {torch.cuda.get_device_name(index)}", file=sys.stderr)
elif device != "cpu":
    sys.exit(f"gpu_golden: DEVICE must be cpu or cuda[:N], got {device!r}")
EOF
then
    exit 2
fi

log="$(mktemp -t gpu-golden.XXXXXX)"
trap 'rm -f "$log"' EXIT
set +e
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
    "$VENV/bin/mutagrade" golden "${ASSIGNMENT[@]}" --device "$DEVICE" --throughput "$N" --batch "$BATCH" | tee "$log"
status=${PIPESTATUS[0]}
set -e

# "throughput: 246.8 cases/s on cpu (float64), 64 cases in batches of 32, max deviation 9.71e-16"
line="$(grep '^throughput: ' "$log" || true)"
if [ -z "$line" ]; then
    echo "gpu_golden: mutagrade golden printed no throughput (exit $status)" >&2
    exit 2
fi
rate="$(sed -E 's/^throughput: ([0-9.]+) cases\/s.*/\1/' <<<"$line")"
dtype="$(sed -E 's/.* on [^ ]+ \(([a-z0-9]+)\).*/\1/' <<<"$line")"
deviation="$(sed -E 's/.*max deviation ([-+0-9.eE]+|inf|nan)$/\1/' <<<"$line")"
tolerance=1e-10
[ "$dtype" = "float32" ] && tolerance=1e-4

echo
echo "assignment: ${ASSIGNMENT[1]:-default}"
echo "device: $DEVICE ($dtype)"
echo "cases: $N in batches of $BATCH"
echo "cases_per_s: $rate"
echo "max_deviation: $deviation (tolerance $tolerance)"

if ! "$VENV/bin/python" -c "import sys; sys.exit(0 if float('$deviation') <= $tolerance else 1)"; then
    echo "gpu_golden: torch on $DEVICE deviates from the float64 reference by $deviation > $tolerance" >&2
    exit 1
fi
exit "$status"
