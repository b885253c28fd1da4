#!/usr/bin/env bash
# Tier 2 of a GPU visit (benchmarks/gpu_second.py), after tier 1 and only with 7 minutes of device time or more
# left: the measuring call, once every staged part is applied. The parts (.devwheels/part-NN, cut on the CPU machine
# by `gpu_second.py prepare`) go first, one device call each, back to back so the node stays warm, each carrying
# its part and removing it (a part left on the node would be applied twice):
#   bash .devwheels/part-00/apply.sh; rm -rf .devwheels/part-00      (the last part installs into /tmp/site)
# torchcodec finds FFmpeg in the libraries PyAV's wheel bundles (the node has no FFmpeg): links named as torchcodec
# asks for them are made in /tmp/ffmpeg-libs (benchmarks/ffmpeg_links.sh).
#   OUT=/tmp/out bash benchmarks/gpu_second.sh [--route cpu-open --data DIR --window-s 8]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-benchmarks/results/gpu-second}
mkdir -p "$OUT"
if [ -d /tmp/site ]; then
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    libs=$(ls -d /tmp/site/av.libs 2>/dev/null || true)
    if [ -n "$libs" ]; then
        LD_LIBRARY_PATH=$(bash benchmarks/ffmpeg_links.sh "$libs" /tmp/ffmpeg-libs)
        export LD_LIBRARY_PATH
    fi
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" benchmarks/gpu_second.py measure --out "$OUT" "$@"
