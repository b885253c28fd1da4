#!/bin/bash
# Submit the `dali-stream bench` matrix (decode gpu|cpu x mode single|sarm) as isolated SLURM jobs, one
# node each, results into one folder; then summarise them into a table and chart.
#
#   slurm/bench_matrix.sh [--serial] DATASET OUT_DIR [extra `dali-stream bench` flags...]
#
# --serial chains the jobs (each starts after the previous ends: network-bound runs against one remote
# store must not overlap); otherwise they may run side by side on different nodes. Account/partition come
# from SBATCH_ACCOUNT / SBATCH_PARTITION (sbatch reads them) or your defaults. Prints the job ids; the last
# job writes OUT_DIR/chart.png. DALI_STREAM_PYTHON picks the interpreter (default: python on PATH).
set -euo pipefail
serial=0
if [[ ${1:-} == --serial ]]; then serial=1; shift; fi
if [[ $# -lt 2 ]]; then sed -n 2,12p "$0"; exit 2; fi
dataset=$1; out=$2; shift 2
py="${DALI_STREAM_PYTHON:-python}"
mkdir -p "$out"
deps=()
prev=""
for decode in gpu cpu; do
    for mode in single sarm; do
        dep=()
        if [[ $serial == 1 && -n $prev ]]; then dep=(--dependency="afterany:$prev"); fi
        gres=()
        if [[ $decode == gpu ]]; then gres=(--gpus-per-node=1); fi
        if [[ -n "${BENCH_NO_GPU_REQUEST:-}" ]]; then gres=(); fi
        jid=$(sbatch --parsable -N1 -n1 --exclusive "${gres[@]}" "${dep[@]}" --job-name="bench-$decode-$mode" \
            --output="$out/slurm-%j-$decode-$mode.out" \
            --wrap="$(printf '%q ' "$py" -m dali_stream bench "$dataset" --decode "$decode" --mode "$mode" --out-dir "$out" "$@")")
        echo "submitted $decode/$mode: job $jid"
        deps+=("$jid")
        prev=$jid
    done
done
jid=$(sbatch --parsable -N1 -n1 --dependency="afterany:$(IFS=:; echo "${deps[*]}")" --job-name=bench-summary \
    --output="$out/slurm-%j-summary.out" \
    --wrap="$(printf '%q ' "$py" -m dali_stream bench summarize "$out" --png "$out/chart.png")")
echo "submitted summary: job $jid"
