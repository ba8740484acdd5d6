#!/usr/bin/env bash
# The GPU check: everything esverify does on CUDA, in under five minutes on one GPU, as one table.
#
#   bash benchmarks/gpu_check.sh            # needs a CUDA device and a CUDA build of torch
#
# Steps (each under its own time limit, so the whole stays under five minutes):
#   1. the CUDA tests:            python -m pytest -m cuda tests/
#   2. parity on CUDA:            esverify parity --devices cuda on the four stand-in clones
#                                 (tests/standins/: the five references)
#   3. the noise generator:       benchmarks/bench_rng.py --cuda (M elements/s per mapping and backend)
#   4. replay on CUDA:            the replay kernel (esverify.replay.kernel.replay_elements) with
#                                 device cuda on a synthetic run log (benchmarks/bench_replay.py's),
#                                 member-elements per second, against the contract generator's rate on
#                                 the device and against the device's memory bandwidth (a measured
#                                 device-to-device copy: bytes read + written per second). The share
#                                 of the bandwidth counts 8 bytes per member-element: the least a
#                                 replay moves that writes each noise element once and reads it once.
# Then one table: step, status, seconds, figures. Exit 0 when every step passed, 1 when one failed or
# ran out of time, 2 without a CUDA device (nothing runs then; the message says why).
#
# Any session lent a GPU runs it first and records the table in docs/benchmarks.md ("GPU check").
# GPU_CHECK_DEVICE=cpu runs the same steps on the CPU, small (the script's own plumbing, on a machine
# without a GPU; its figures mean nothing). PYTHON picks the interpreter (default: python).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
if [ "$DEVICE" != cuda ] && [ "$DEVICE" != cpu ]; then
    echo "gpu_check: GPU_CHECK_DEVICE must be cuda or cpu, got '$DEVICE'" >&2
    exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
TABLE="$WORK/table.tsv"
: > "$TABLE"

if [ "$DEVICE" = cuda ]; then
    if ! "$PY" - <<'EOF'
import sys
try:
    import torch
except ImportError as exc:
    sys.exit(f"gpu_check: torch does not import ({exc}): install esverify with torch first")
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: no CUDA device: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}) "
             "sees none. This check needs one GPU and a CUDA build of torch; nothing was run")
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
    then
        exit 2
    fi
fi

# step NAME LIMIT_S FUNCTION [ARGS...]: runs the step's function under `timeout` (in a bash of its own, the
# functions and settings exported), its output to $WORK/NAME.log, its figures from $WORK/NAME.figures
step() {
    local name=$1 limit=$2
    shift 2
    local start end status code
    start=$(date +%s.%N)
    timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" > "$WORK/$name.log" 2>&1
    code=$?
    end=$(date +%s.%N)
    case $code in
        0) status=pass ;;
        124|137) status="TIMEOUT (${limit} s)" ;;
        *) status="FAIL (exit $code)" ;;
    esac
    printf '%s\t%s\t%.1f\t%s\n' "$name" "$status" "$(echo "$end - $start" | bc)" \
        "$(cat "$WORK/$name.figures" 2>/dev/null || tail -n 1 "$WORK/$name.log" | cut -c1-120)" >> "$TABLE"
    if [ "$code" != 0 ]; then
        echo "gpu_check: $name: $status; the last lines of its output:" >&2
        tail -n 15 "$WORK/$name.log" >&2
    fi
}

# 1. the CUDA tests (on the CPU: the marker's selection is collected and skipped, which checks the plumbing)
pytest_figures() {
    "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/ "$@" > "$WORK/pytest.out" 2>&1
    local code=$?
    tail -n 1 "$WORK/pytest.out" > "$WORK/cuda-tests.figures"
    cat "$WORK/pytest.out"
    # no CUDA test collected (5) is a pass on the CPU, where they are all skipped or deselected
    [ "$code" = 5 ] && [ "$DEVICE" = cpu ] && return 0
    return $code
}

# 2. parity on the stand-ins, CUDA rows only
parity() {
    local S=tests/standins extra=()
    [ "$DEVICE" = cpu ] && extra=(--small --dtypes f32 --schemes iid --case "*/cpu/f32/iid/perturb/*")
    "$PY" -m esverify parity --ref "$S/es-at-scale" --ref "$S/es-awd" --ref "$S/skill-sample" \
        --ref "$S/eggroll-vllm" --devices "$DEVICE" --out "$WORK/parity" --quiet "${extra[@]}"
    local code=$?
    "$PY" - "$WORK/parity" > "$WORK/parity.figures" <<'EOF'
import sys
import pandas as pd
frame = pd.read_csv(f"{sys.argv[1]}/parity-cases.csv", keep_default_na=False)
counts = frame["status"].value_counts().to_dict()
print(f"{len(frame)} rows: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
EOF
    return $code
}

# 3. the noise generator's throughput on the device (bench_rng.py --cuda's measurement and table)
rng_figures() {
    "$PY" - "$DEVICE" "$WORK/rng.figures" <<'PYEOF'
import sys

sys.path.insert(0, "benchmarks")
from bench_rng import measure  # noqa: E402

from esverify.report import console_table  # noqa: E402

device, figures = sys.argv[1], sys.argv[2]
frame = measure(1 << 24 if device == "cuda" else 1 << 20, 5, 2, device == "cuda")
print(console_table(frame.round({"M_per_s": 1, "ratio_to_randn": 3})))
rows = frame[frame.device == device]
if rows.empty:
    sys.exit(f"no {device} row: torch sees no such device")
with open(figures, "w") as f:
    f.write("; ".join(f"{r.mapping}/{r.backend} {r.M_per_s:,.1f} M/s" for r in rows.itertuples()))
PYEOF
}

# 4. replay on the device: member-elements per second, its share of the generator and of the bandwidth
replay() {
    "$PY" - "$DEVICE" "$WORK" > "$WORK/replay.figures" <<'EOF'
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, "benchmarks")
from bench_replay import _log  # noqa: E402 - the synthetic run log of the replay benchmark

from esverify import rng  # noqa: E402
from esverify.replay.kernel import Job, replay_elements  # noqa: E402
from esverify.replay.log import read_log  # noqa: E402
from esverify.replay.units import plan_units  # noqa: E402

device, work = sys.argv[1], Path(sys.argv[2])
elements, population, iterations = (1 << 26, 30, 2) if device == "cuda" else (1 << 18, 6, 1)
folder = Path(tempfile.mkdtemp(dir=work))
_log(folder, population, iterations, 4, "es-awd")
log = read_log(folder)
job = Job(base="", expect="", profile=log.profile, noise="contract", mapping="poly32", scheme="correlated",
          slots=("w",), sigma=log.sigma, alpha=log.alpha, population=log.population, decay="none", lam=0.0,
          iterations=tuple((it.seeds, it.coeffs, tuple(log.evaluated(it))) for it in log.iterations), device=device)
units = plan_units([("w", (elements,), torch.float32)], "contract", elements)
base = torch.randn(elements, device=device)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)


def timed(fn, repeats=3):
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


with torch.no_grad():
    seconds = timed(lambda: [replay_elements(job, u, base[u.start:u.end]) for u in units])
members = sum(len(evaluated) for _, _, evaluated in job.iterations)
rate = elements * members / seconds                        # member-elements per second
out = torch.empty(elements, device=device)
gen = elements / timed(lambda: rng.gaussian_into(out, 12345, 0, "poly32"))
src, dst = torch.empty(elements * 4, device=device), torch.empty(elements * 4, device=device)
bandwidth = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src))   # bytes read + written per second
print(f"{rate / 1e9:.2f} G member-elements/s ({elements} elements x {members} members); "
      f"{rate / gen:.0%} of the generator ({gen / 1e9:.2f} G/s); {8 * rate / bandwidth:.0%} of the copy "
      f"bandwidth ({bandwidth / 1e9:.1f} GB/s, 8 B per member-element)")
EOF
    local code=$?
    cat "$WORK/replay.figures"
    return $code
}
export PY DEVICE WORK
export -f pytest_figures parity rng_figures replay
if [ "$DEVICE" = cuda ]; then
    step cuda-tests 150 pytest_figures
else
    step cuda-tests 150 pytest_figures --co
fi
step parity 120 parity
step rng 45 rng_figures
step replay 60 replay

echo
printf '%-12s %-18s %9s  %s\n' step status seconds figures
while IFS=$'\t' read -r name status seconds figures; do
    printf '%-12s %-18s %9s  %s\n' "$name" "$status" "$seconds" "$figures"
done < "$TABLE"
printf 'device %s; %s; %s UTC; commit %s; load %s\n' "$DEVICE" \
    "$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>/dev/null)" \
    "$(date -u '+%Y-%m-%d %H:%M')" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
if grep -qv $'\tpass\t' "$TABLE"; then
    exit 1
fi
exit 0
