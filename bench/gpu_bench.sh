#!/usr/bin/env bash
# The benchmarks of the eager engine and the allocator in one device call, after
# bench/gpu_validate.sh (which installs the wheels and warms the kernel cache):
#
#   BEFORE=DIR bash bench/gpu_bench.sh
#
# 1. bench/eager.py: host time per call of vram, PyTorch and CuPy, interleaved round by round
#    (the rows of issue 31's table and the ops after them), and bench/eager_device.py: the
#    device's time per call of the same rows;
# 2. bench/alloc.py and bench/trace_ops.py: the allocator against PyTorch and CuPy, and
#    BEFORE's src/ (an older commit's) against this tree's: the traces with both trees in
#    one process, interleaved round by round; the allocator benchmark each alone in its
#    process;
# 3. bench/eager.py --decoder: a GPT-2-small decoder block, vram against PyTorch eager;
# 4. bench/eager_reduce.py at 64M elements: GB/s of add, exp, sum, softmax and layer_norm
#    (REDUCE=0 leaves it out).
# Each step has a time limit of its own ($STEP_SECONDS, default 120), so that a slow one
# cannot take the others' time. Logs and JSON go to $OUT (the JSON also into results.tar).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vram-out}
RESULTS=/tmp/vram-results
mkdir -p "$OUT" "$RESULTS"
source bench/_gpu_env.sh || exit 1
export VRAM_CACHE_DIR=$PWD/.kcache
limit=${STEP_SECONDS:-120}

step() {  # step NAME COMMAND...: run with the step's limit, log to $OUT/NAME.txt
    local name=$1 t0=$SECONDS
    shift
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    echo "== $name: exit $?, $((SECONDS - t0)) s"
    tail -24 "$OUT/$name.txt"
    tar -C /tmp -cf "$OUT/results.tar" vram-results
}

step eager python3 bench/eager.py --rounds 15 --calls 1000 --out "$RESULTS"
step eager_device python3 bench/eager_device.py --out "$RESULTS"
traces=/tmp/vram-traces
mkdir -p "$traces" && cp tests/data/traces/*.pickle.xz "$traces"/
step trace_ops python3 bench/trace_ops.py --traces "$traces" --repeats 9 \
    --dump-sequences /tmp/sequences.json --out "$RESULTS"
step alloc python3 bench/alloc.py --repeats 5 --pairs "${ALLOC_PAIRS:-10000}" --out "$RESULTS"
if [ -n "${BEFORE:-}" ]; then
    # the traces: this tree and BEFORE's in one process, their rounds interleaved (one table)
    step trace_ops-after python3 bench/trace_ops.py --label after --also-src "$BEFORE" \
        --also-label before --only-vram --repeats 9 --sequences /tmp/sequences.json \
        --out "$RESULTS"
    for side in after before; do
        src=$PWD/src
        [ "$side" = before ] && src=$BEFORE
        step "alloc-$side" python3 bench/alloc.py --vram-src "$src" --label "$side" \
            --only-vram --repeats 5 --pairs "${ALLOC_PAIRS:-10000}" --out "$RESULTS"
    done
fi
step decoder python3 bench/eager.py --decoder --out "$RESULTS"
[ "${REDUCE:-1}" = 1 ] && step reduce python3 bench/eager_reduce.py --sizes 64M --out "$RESULTS"
