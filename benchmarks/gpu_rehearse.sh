#!/usr/bin/env bash
# A GPU visit rehearsed on a CPU machine with the node's software: a virtual environment of Python 3.12 holding
# PyPI's torch 2.11.0 (its CUDA 13 build, as on the node), numpy, pyarrow, fsspec and pytest, plus what tier 2 stages
# (`gpu_second.py`'s WHEELS; PyNvVideoCodec left out: it does not import without NVIDIA's driver libraries). Then,
# on the small datasets `gpu_first.py prepare --small` writes:
#   1. tier 1 on `cpu-open`, the imports the node lacks refused (as tests/gpu/test_gpu_first.py does on Python 3.11);
#   2. tier 2 on `cpu-open` (its first step the loader in decode processes, `gpu_processes.py`);
#   3. `gpu_decide.py` on what the two tiers wrote, laid out as a visit's results: the ratios and targets it prints;
#   4. tier 1 as the node starts it (`nvdec-open`): its wheel installed into /tmp/site, and the preflight must stop
#      with status 2, naming the driver libraries this machine lacks.
# What the CI's dry runs cannot show: a difference of Python 3.12 or torch 2.11 that breaks a visit. About 3 GB of
# wheels into VENV, once; then ~2 minutes. Run after the README's install: the project's .venv writes the datasets.
# KEEP=DIR keeps the outputs in DIR (default: a temporary folder, removed at the end).
#   PY312=/path/to/python3.12 bash benchmarks/gpu_rehearse.sh [VENV (default /tmp/gpu-rehearse-py312)]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-/tmp/gpu-rehearse-py312}
PY312=${PY312:-python3.12}
if ! "$PY312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    echo "gpu-rehearse: PY312=$PY312 is not a Python 3.12 interpreter (the node's); pass its path" >&2
    exit 2
fi
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    "$PY312" -m venv "$VENV"
fi
wheels=$("$PY" -c 'import sys; sys.path.insert(0, "benchmarks"); from gpu_second import WHEELS
print(" ".join(w for w in WHEELS if not w.lower().startswith("pynvvideocodec")))')
"$PY" -m pip install -q torch==2.11.0 numpy pyarrow fsspec pytest $wheels  # pytest: the node has it (tier 2 runs tests)
"$PY" -c 'import sys, torch; print(f"gpu-rehearse: Python {sys.version.split()[0]}, torch {torch.__version__}")'

if [ -n "${KEEP:-}" ]; then
    work=$KEEP
    mkdir -p "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
.venv/bin/python benchmarks/gpu_first.py prepare --small --data "$work/data" | tail -n 1
deny=$("$PY" -c 'import sys; sys.path.insert(0, "benchmarks"); from gpu_first import NOT_ON_THE_NODE; print(NOT_ON_THE_NODE)')

PY="$PY" OUT="$work/first" DALI_STREAM_DENY_IMPORTS="$deny" bash benchmarks/gpu_first.sh --route cpu-open \
    --data "$work/data" --threads 1,2 --window-s 0.3 > "$work/first.log" 2>&1 \
    || { tail -n 40 "$work/first.log"; echo "gpu-rehearse: tier 1 on cpu-open failed" >&2; exit 1; }
echo "gpu-rehearse: tier 1 on cpu-open passed"

PY="$PY" OUT="$work/second" bash benchmarks/gpu_second.sh --route cpu-open --data "$work/data" --window-s 0.5 \
    > "$work/second.log" 2>&1 \
    || { tail -n 40 "$work/second.log"; echo "gpu-rehearse: tier 2 on cpu-open failed" >&2; exit 1; }
echo "gpu-rehearse: tier 2 on cpu-open passed"

mkdir -p "$work/visit"
ln -sfn "$work/first" "$work/visit/gpu-first"
ln -sfn "$work/second" "$work/visit/gpu-second"
status=0
"$PY" benchmarks/gpu_decide.py "$work/visit" > "$work/decide.log" 2>&1 || status=$?
if [ "$status" -gt 1 ] || ! grep -q "^target " "$work/decide.log"; then  # 1: no entry earned (cpu-open): expected
    tail -n 40 "$work/decide.log"
    echo "gpu-rehearse: gpu_decide.py did not read the visit (status $status)" >&2
    exit 1
fi
echo "gpu-rehearse: gpu_decide.py read the visit:"
grep -E "^target |^\| h264/single \| " "$work/decide.log" | sed 's/^/   /'

status=0
PY="$PY" OUT="$work/nvdec" GPU_FIRST_TIMEOUT=60 bash benchmarks/gpu_first.sh --data "$work/data" --threads 1 \
    --window-s 0.3 > "$work/nvdec.log" 2>&1 || status=$?
stopped=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["preflight"]["ok"] is False)' \
    "$work/nvdec/gpu_first.json" 2>/dev/null || echo False)
if [ "$status" != 2 ] || [ "$stopped" != True ]; then
    tail -n 40 "$work/nvdec.log"
    echo "gpu-rehearse: tier 1 on nvdec-open ended with status $status, not the preflight's 2 on a machine without" \
         "a GPU" >&2
    exit 1
fi
echo "gpu-rehearse: tier 1 on nvdec-open stopped at its preflight, as it must without a GPU:"
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))["preflight"]
print("  ", "; ".join(f"{k}: {v}" for k, v in d["driver_libraries"].items()))' "$work/nvdec/gpu_first.json"
