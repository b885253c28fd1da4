#!/usr/bin/env bash
# `make gpu-check`: on a machine with an NVIDIA GPU, every GPU-route number and check in one command, measurements
# first (GPU time is short: the first minutes answer "which engine pays here"), tests after.
#   0. preflight (benchmarks/gpu_preflight.py): every import, torch's CUDA build against the driver, the node probe,
#      a tiny NVDEC batch on a CUDA device. A failure stops here with its reason (exit 4): nothing later could work.
#   1. measure (-> $out/measure/, log measure.log; GPU_MEASURE_S-second windows, default 5): samples/s at batch 64,
#      single mode, on two 640x480 H.264 GOP-2 cameras, per engine: DALI's fn.decoders.video one clip per sample
#      and joined into 1, 2, 4 and 7 groups (the first run also: NVDEC limit, utilisation, torchcodec on CUDA and
#      PyNvVideoCodec peers, a bfloat16 matmul load beside it); the open-decoder engine (nvdec_engine=open) at 1,
#      2, 4 and 7 decode threads (its NVDEC limit on whole segments, utilisation); then the CPU route at 1, 2, 4, 8
#      and 16 workers on the H.264 and on an AV1 twin (an H100 has no AV1 decoder: the CPU route is what lerobot's
#      default AV1 gets there); and where DALI's per-sample milliseconds go (dali_sample_profile.py: graph, fixed
#      per sample, per picture, bytes, threads, against the open engine's per-picture cost). The datasets come from `make gpu-datasets` on the CPU machine, carried with the
#      tree (the GPU node has no ffmpeg command and two cores' worth of time is better spent measuring); absent,
#      they are written here first;
#   2. `dali-stream diagnose --json` (what this node decodes, and why a GPU would not be used);
#   3. the `gpu`-marked tests (tests/gpu/test_gpu.py), with their log and a JUnit file: the boundary matrix and the
#      wild encodings through NVDEC on both engines (what decode/proven.py's entries are earned by), and the rest.
#      Known failures are xfail with their reason, so a failing test is a new one;
#   4. the NVDEC-pays runs (sarm and camera-window modes, the CPU route on every core, the baseline) and a short
#      benchmark on a 640x480 sample (h264, hevc, av1; GOP 2): bench --decode gpu and cpu, single mode;
#   5. diagnostics: torchcodec decoders reused across calls (tests/fetch/test_segments.py -k reused), the wrong-frame
#      checks on this node's CPU routes (tests/loader/test_boundaries.py, tests/decode/test_frame_guard.py), every clip's ids
#      through NVDEC (nvdec_clip_ids.py), NVDEC cost per clip (nvdec_clip_cost.py), two loaders in one process
#      (gpu_two_loaders.py --both), one joined stream per batch against per-sample clips on NVDEC
#      (joined_clips.py): the open questions of results/NVIDIA-H100-80GB-HBM3/README.md;
#   6. a summary table (benchmarks/gpu_summary.py -> summary.md): tests by outcome, every NVDEC frame check, and
#      per run samples/s against the CPU route on every core, the NVDEC limit ratio and utilisation.
# Every step runs under `timeout` (a stuck C++ call cannot hang the check); pytest's own per-test limit uses its
# thread method, which also stops a test stuck in C++. Results go to benchmarks/results/<gpu-name>/ (override with
# GPU_OUT). Exit status: 4 when the preflight failed, else the tests' (non-zero when a GPU test failed, none ran,
# or no GPU was found), else the benchmarks'.
#
#   PY=python3 GPU_OUT=/tmp/out bash benchmarks/gpu_check.sh
# PY: the interpreter holding dali_stream's dependencies (default .venv/bin/python, else python3).
# GPU_TEST_TIMEOUT: seconds one GPU test may run (default 900); GPU_STEP_TIMEOUT: seconds one benchmark or
# diagnostic script may run (default 1800). GPU_MEASURE_ONLY=1 stops after step 1; GPU_SKIP_MEASURE=1 skips it
# (the second call on a node that measured first).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU with a driver here (nvidia-smi missing or failing); run it on a GPU node" >&2
    exit 2
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | tr ' ' '-' | tr -cd 'A-Za-z0-9._-')
out=${GPU_OUT:-benchmarks/results/$gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 SVT_LOG=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the scripts import dali_stream from this tree
unset DALI_STREAM_CPU_ONLY
step=${GPU_STEP_TIMEOUT:-1800}
run() { timeout -k 30 "$step" "$@"; }  # every step: killed after $step s (exit 124), never a hang

echo "== preflight ($gpu)"
timeout -k 30 600 "$PY" benchmarks/gpu_preflight.py .demo 2>&1 | tee "$out/preflight.log"
pre=${PIPESTATUS[0]}
if [ "$pre" -ne 0 ]; then
    echo "gpu-check: stopped at the preflight (exit $pre): see $out/preflight.log" >&2
    exit 4
fi

h264=.demo/gpu-check-640x480-h264x2
av1=.demo/gpu-check-640x480-av1x2
bench=0
if [ "${GPU_SKIP_MEASURE:-0}" != 1 ]; then
echo "== measure -> $out/measure (log measure.log)"
[ -f "$h264/meta/info.json" ] && [ -f "$av1/meta/info.json" ] || run bash benchmarks/gpu_datasets.sh
measure_s=${GPU_MEASURE_S:-5}
m=(run "$PY" -m dali_stream bench --batch-size 64 --mode single --duration-s "$measure_s" --warmup-batches 3
   --out-dir "$out/measure" --no-baseline)
measure() { "${m[@]}" "$@" 2>&1 | tee -a "$out/measure.log"; bench=$(( bench || PIPESTATUS[0] )); }
: >"$out/measure.log"
measure "$h264" --decode gpu --nvdec-engine dali --join-streams 0 --gpu-load
for groups in 1 2 4 7; do
    measure "$h264" --decode gpu --nvdec-engine dali --join-streams "$groups" --no-peers --no-limit
done
for threads in 1 2 4 7; do
    measure "$h264" --decode gpu --nvdec-engine open --decode-threads "$threads" --no-peers
done
for workers in 1 2 4 8 16; do
    for data in "$h264" "$av1"; do measure "$data" --decode cpu --num-workers "$workers" --no-peers --no-limit; done
done
run "$PY" benchmarks/dali_sample_profile.py "$h264" --json "$out/measure/dali-sample-profile.json" 2>&1 | \
    tee -a "$out/measure.log"
"$PY" benchmarks/gpu_summary.py "$out" --measure-only
if [ "${GPU_MEASURE_ONLY:-0}" = 1 ]; then
    echo "gpu-check: measurements only (GPU_MEASURE_ONLY=1), bench exit $bench; results in $out/measure"
    exit "$bench"
fi
fi

echo "== diagnose -> $out/diagnose.json"
run "$PY" -m dali_stream diagnose --json >"$out/diagnose.json"
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['verdict']); print('gpu:', r['gpu'])" \
    "$out/diagnose.json"

echo "== gpu tests -> $out/gpu-tests.log"
timeout_flag=()
"$PY" -c "import pytest_timeout" 2>/dev/null && \
    timeout_flag=(--timeout="${GPU_TEST_TIMEOUT:-900}" --timeout-method=thread)
timeout -k 60 "${GPU_TESTS_TIMEOUT:-5400}" "$PY" -m pytest -m gpu -v -rsx "${timeout_flag[@]}" -p no:cacheprovider \
    tests/gpu/test_gpu.py --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log"
tests=${PIPESTATUS[0]}
if [ "$tests" -eq 0 ] && ! tail -n1 "$out/gpu-tests.log" | grep -q " passed"; then
    echo "gpu-check: no GPU test ran (all skipped: see the reason above; diagnose.json names the layer)" >&2
    tests=3
fi

echo "== NVDEC pays? -> $out/nvdec-pays"
pays=(run "$PY" -m dali_stream bench "$h264" --decode gpu --batch-size 64 --duration-s 10 --out-dir "$out/nvdec-pays")
"${pays[@]}" --mode single --cpu-all-cores --gpu-load --baseline-workers 0,2 2>&1 | tee "$out/nvdec-pays.log"
bench=$(( bench || PIPESTATUS[0] ))
for extra in "--mode sarm" "--mode camera-window"; do
    # shellcheck disable=SC2086
    "${pays[@]}" $extra --no-baseline --no-peers 2>&1 | tee -a "$out/nvdec-pays.log"
    bench=$(( bench || PIPESTATUS[0] ))
done

echo "== bench -> $out"
sample=.demo/gpu-check-640x480-scene  # camera-like frames at lerobot's crf, as the bench samples
if [ ! -f "$sample/meta/info.json" ]; then
    run "$PY" -m dali_stream make-sample "$sample" --overwrite --episodes 24 --min-length 60 --max-length 120 \
        --height 480 --width 640 --cameras front:h264,side:hevc,wrist:av1 --gop 2 --episodes-per-file 8 \
        --content scene --crf 30
fi
run "$PY" -m dali_stream bench "$sample" --decode gpu --mode single --duration-s 10 --baseline-workers 0,2 \
    --out-dir "$out" 2>&1 | tee "$out/bench-gpu.log"
bench=$(( bench || PIPESTATUS[0] ))
run "$PY" -m dali_stream bench "$sample" --decode cpu --mode single --duration-s 10 --no-baseline \
    --out-dir "$out" 2>&1 | tee "$out/bench-cpu.log"
bench=$(( bench || PIPESTATUS[0] ))

echo "== diagnostics -> $out (exit status unaffected)"
run "$PY" -m pytest -q -p no:cacheprovider tests/fetch/test_segments.py -k reused >"$out/torchcodec-reuse.log" 2>&1
tail -n1 "$out/torchcodec-reuse.log"
# episode-boundary frames on this node's torchcodec/FFmpeg (CPU routes): the boundary matrix, the frame-time check, decoder reuse
# under churn with two loaders in one process
run "$PY" -m pytest -q -p no:cacheprovider tests/loader/test_boundaries.py tests/decode/test_frame_guard.py >"$out/wrong-frames.log" 2>&1
tail -n1 "$out/wrong-frames.log"
run "$PY" benchmarks/nvdec_clip_ids.py >"$out/nvdec-clip-ids.txt" 2>&1; tail -n3 "$out/nvdec-clip-ids.txt"
run "$PY" benchmarks/nvdec_clip_cost.py "$sample" >"$out/nvdec-clip-cost.txt" 2>&1; tail -n3 "$out/nvdec-clip-cost.txt"
run "$PY" benchmarks/gpu_two_loaders.py --both >"$out/two-loaders.txt" 2>&1; tail -n3 "$out/two-loaders.txt"
run "$PY" benchmarks/joined_clips.py "$h264" --batch-size 64 --streams 0,1,2,7 >"$out/joined-clips.txt" 2>&1
tail -n4 "$out/joined-clips.txt"

echo "== summary -> $out/summary.md"
"$PY" benchmarks/gpu_summary.py "$out"
echo "gpu-check: tests exit $tests, bench exit $bench; results in $out"
[ "$tests" -ne 0 ] && exit "$tests"
exit "$bench"
