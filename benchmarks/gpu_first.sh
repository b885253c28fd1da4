#!/usr/bin/env bash
# Tier 1 on a GPU node, one call: NVDEC through the open-decoder engine, measured and checked without DALI or FFmpeg
# (benchmarks/gpu_first.py measure; its doc says what it reports). Before the call, on the CPU machine:
# `make gpu-first-prepare` writes the datasets, FFmpeg's reference pictures and fetches the PyNvVideoCodec wheel;
# the call carries them (.demo/gpu-first, .devwheels-first) with the tree. The wheel is installed into /tmp/site when
# PyNvVideoCodec does not import yet. Results in $OUT (the device tool's folder), else benchmarks/results/gpu-first.
#   OUT=/tmp/out bash benchmarks/gpu_first.sh [--route cpu-open --data DIR --threads 1,4 --window-s 2 --scaling]
# PY: the interpreter (default python3; the CPU dry run passes .venv/bin/python). The measure step is stopped after
# GPU_FIRST_TIMEOUT seconds (default 270): what it measured by then is already in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-benchmarks/results/gpu-first}
mkdir -p "$OUT"
wheel=$(ls .devwheels-first/pynvvideocodec-*-cp3*.whl 2>/dev/null | tail -n1 || true)
if [[ " $* " != *" cpu-open "* ]] && ! "$PY" -c "import PyNvVideoCodec" 2>/dev/null; then
    if [ -z "$wheel" ]; then
        echo "gpu-first: PyNvVideoCodec does not import and no wheel is in .devwheels-first/ (make gpu-first-prepare)" >&2
    else
        start=$SECONDS
        "$PY" -m pip install -q --no-deps --no-index --target /tmp/site "$wheel" 2>&1 | tail -n 5
        echo "gpu-first: installed $(basename "$wheel") into /tmp/site in $((SECONDS - start)) s"
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
export PYTHONUNBUFFERED=1
timeout -k 10 "${GPU_FIRST_TIMEOUT:-270}" "$PY" benchmarks/gpu_first.py measure --out "$OUT" "$@"
status=$?
ls -la "$OUT"
exit $status
