#!/usr/bin/env bash
# The datasets `make gpu-check` measures on, written on the CPU machine (`make gpu-datasets`) and carried to the GPU
# node with the tree (it may have no ffmpeg command, and GPU time is better spent measuring): two 640x480 cameras of
# camera-like frames at lerobot's crf 30 and g=2, 10 episodes of 150-240 frames, as H.264 and as AV1 (lerobot's
# default codec, which an H100's NVDEC cannot decode). Skips a dataset already written.
#   PY=.venv/bin/python bash benchmarks/gpu_datasets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
for codec in h264 av1; do
    out=.demo/gpu-check-640x480-${codec}x2
    if [ -f "$out/meta/info.json" ]; then
        echo "$out: already written"
        continue
    fi
    "$PY" -m dali_stream make-sample "$out" --overwrite --episodes 10 --min-length 150 --max-length 240 \
        --height 480 --width 640 --cameras "front:$codec,side:$codec" --gop 2 --episodes-per-file 5 \
        --content scene --crf 30
    du -sh "$out"
done
