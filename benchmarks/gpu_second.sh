#!/usr/bin/env bash
# Tier 2 of a GPU visit (benchmarks/gpu_second.py), after tier 1 and only with 7 minutes of device time or more
# left. Each call either applies the staged part it carries (.devwheels/part-NN, cut on the CPU machine by
# `gpu_second.py prepare`; the last part installs every wheel into /tmp/site) and stops, or, with everything
# staged, measures. torchcodec finds FFmpeg in the libraries PyAV's wheel bundles (the node has no FFmpeg): links
# named as torchcodec asks for them are made in /tmp/ffmpeg-libs.
#   OUT=/tmp/out bash benchmarks/gpu_second.sh [--route cpu-open --data DIR --window-s 8]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-benchmarks/results/gpu-second}
mkdir -p "$OUT"
for part in .devwheels/part-*/apply.sh; do
    [ -f "$part" ] || continue
    bash "$part" 2>&1 | tee -a "$OUT/staging.log"
    exit "${PIPESTATUS[0]}"  # one part per call: the next call carries the next part
done
if [ -d /tmp/site ]; then
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    libs=$(ls -d /tmp/site/av.libs 2>/dev/null || true)
    if [ -n "$libs" ]; then
        mkdir -p /tmp/ffmpeg-libs
        for lib in "$libs"/lib*.so*; do  # libavcodec-1a2b3c.so.62 -> libavcodec.so.62
            name=$(basename "$lib" | sed -E 's/^(lib[a-z0-9_]+)-[^.]+(\.so\..*)$/\1\2/')
            ln -sf "$lib" "/tmp/ffmpeg-libs/$name"
        done
        export LD_LIBRARY_PATH="/tmp/ffmpeg-libs:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" benchmarks/gpu_second.py measure --out "$OUT" "$@"
