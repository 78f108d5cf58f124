#!/usr/bin/env bash
# The GPU machine's run, in two parts that each fit one call of the device tool:
#
#   bash bench/gpu_run.sh tests     vram info and demo on the GPU, then every GPU test
#   bash bench/gpu_run.sh benches   the benchmarks in $BENCHES (default: the allocator's,
#                                   the streams pipeline, graphs, PyTorch on vram)
#
# Logs and JSON results go to $OUT (flat: the device tool brings back at most 8 files, so
# the JSON files are also packed into $OUT/results.tar). nvmath-python (cuBLAS, cuSOLVER)
# and nccl4py come from wheels in .whl/ where present. BEFORE=DIR also times the allocator
# of another source tree (an older commit's src/) and this one, each alone in its process,
# for before/after rows measured the same way.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vram-out}
mkdir -p "$OUT" /tmp/vram-results
source bench/_gpu_env.sh || exit 1

case "${1:-tests}" in
tests)
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      python3 -m vram info; python3 -m vram demo; } > "$OUT/info.txt" 2>&1
    python3 -m pytest -q -m gpu tests -p no:cacheprovider -rs > "$OUT/gpu-tests.txt" 2>&1
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu-tests.txt" | tail -40
    ;;
benches)
    traces=/tmp/vram-traces
    mkdir -p "$traces" && cp tests/data/traces/*.pickle.xz "$traces"/
    for bench in ${BENCHES:-trace_ops scaling alloc streams graphs torch_on_vram}; do
        extra=()
        [ "$bench" = trace_ops ] && extra=(--traces "$traces" --dump-sequences /tmp/sequences.json)
        python3 "bench/$bench.py" "${extra[@]}" --out /tmp/vram-results > "$OUT/$bench.txt" 2>&1
        tail -12 "$OUT/$bench.txt"
    done
    if [ -n "${BEFORE:-}" ]; then
        # before and after the same way (vram alone in its process), one after the other
        for side in after before; do
            src=$PWD/src
            [ "$side" = before ] && src=$BEFORE
            PYTHONPATH=/tmp/site python3 bench/trace_ops.py --vram-src "$src" --label $side \
                --only-vram --sequences /tmp/sequences.json --out /tmp/vram-results 2>&1 | tail -8
            PYTHONPATH=/tmp/site python3 bench/scaling.py --vram-src "$src" --label $side \
                --only-vram --rounds 1000 --out /tmp/vram-results 2>&1 | tail -8
            PYTHONPATH=/tmp/site python3 bench/alloc.py --vram-src "$src" --label $side \
                --only-vram --out /tmp/vram-results 2>&1 | tail -8
        done
    fi
    tar -C /tmp -cf "$OUT/results.tar" vram-results
    ;;
*)
    echo "usage: bash bench/gpu_run.sh tests|benches" >&2
    exit 2
    ;;
esac
