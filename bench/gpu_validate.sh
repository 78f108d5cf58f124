#!/usr/bin/env bash
# The GPU tests of the whole tree in one device call, and the kernel cache carried between
# calls:
#
#   bash bench/gpu_validate.sh [TEST FILE ...]
#
# 1. every kernel family ``python -m vram.ops.warm`` knows is compiled on all cores into
#    .kcache/ (unpacked first from .kcache.tgz where a caller carried one);
# 2. each GPU test file in a process of its own (a kernel that faults poisons its CUDA
#    context, and only its own file's results with it), the files given or every one but
#    AOTInductor's (bench/aoti_gpu.sh runs those, with their export), and the GPU differential
#    tests of the kernels' launch choices (tests/ops/test_kernel_choices.py), until $TEST_SECONDS
#    (default 420) have gone, so that the call ends inside its limit. Without file
#    arguments the files run in three lanes side by side (the engine's kernels; the
#    libraries and the runtime; the allocator's, whose tests read the device's free memory,
#    in a lane of their own); the fused attention kernel also runs under compute-sanitizer's
#    memcheck (bench/sanitize/attn_probe.py) at the head of the first lane;
# 3. the kernel cache packed again into $OUT/kcache.tgz for the next call to carry (not
#    with PACK_CACHE=0).
# WARM=0 leaves step 1 out. With PROBE=1 the LU cluster probe (bench/sanitize.sh probe) runs beside the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vram-out}
mkdir -p "$OUT" .kcache
source bench/_gpu_env.sh || exit 1
export VRAM_CACHE_DIR=$PWD/.kcache
[ -f .kcache.tgz ] && tar -C .kcache -xzf .kcache.tgz
start=$SECONDS
budget=${TEST_SECONDS:-420}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -m vram info; } > "$OUT/info.txt" 2>&1
[ "${WARM:-1}" = 1 ] && python3 -m vram.ops.warm -j "$(nproc)" > "$OUT/warm.txt" 2>&1
echo "warm: $((SECONDS - start)) s: $(tail -3 "$OUT/warm.txt" | tr '\n' ' ' | cut -c1-400)"
if [ "${PROBE:-0}" = 1 ]; then
    bash bench/sanitize.sh probe > "$OUT/probe.txt" 2>&1 &
    probe=$!
fi

run_files() {  # run_files LOG FILE...: each file in its own process, within the budget
    local log=$1 file left t0
    shift
    : > "$log"
    for file in "$@"; do
        [ -f "$file" ] || continue
        left=$((budget - (SECONDS - start)))
        if [ "$left" -le 5 ]; then
            echo "NOT RUN (out of time): $file" | tee -a "$log"
            continue
        fi
        t0=$SECONDS
        { echo "=== $file"; timeout "$left" python3 -m pytest -q -m gpu "$file" \
            -p no:cacheprovider -rs --durations=5 2>&1; } >> "$log"
        echo "$file: $((SECONDS - t0)) s: $(tail -1 "$log" | cut -c1-150)"
    done
}

files_of() {
    local name
    for name in "$@"; do echo "tests/gpu/test_${name}.py"; done
}

if [ $# -gt 0 ]; then
    run_files "$OUT/gpu-tests.txt" "$@"
else
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    (
        timeout 120 "$sanitizer" --tool memcheck --error-exitcode 3 \
            python3 bench/sanitize/attn_probe.py > "$OUT/attn-memcheck.txt" 2>&1
        echo "attention under memcheck: exit $?: $(grep -c ' ok ' "$OUT/attn-memcheck.txt") calls"
        run_files "$OUT/gpu-tests-1.txt" $(files_of tensor_gpu pointwise_gpu activations_gpu \
            index_gpu attention_gpu reduce_gpu random_gpu composite_gpu) \
            tests/ops/test_kernel_choices.py
    ) &
    lane1=$!
    run_files "$OUT/gpu-tests-2.txt" $(files_of blas_gpu linalg_gpu optim_gpu graphs_gpu \
        streams_gpu cuda_driver sanitizer_gpu triton_gpu) &
    lane2=$!
    run_files "$OUT/gpu-tests-3.txt" $(files_of memory_gpu async_backend_gpu doctor_gpu \
        snapshot_torch interop_plugins multi_gpu)
    wait "$lane1" "$lane2"
    cat "$OUT"/gpu-tests-[123].txt > "$OUT/gpu-tests.txt"
    rm -f "$OUT"/gpu-tests-[123].txt
fi
grep -E "^(FAILED|ERROR)" "$OUT/gpu-tests.txt" | cut -c1-300 | head -60
if [ -n "${probe:-}" ]; then
    wait "$probe"
    echo "probe: $((SECONDS - start)) s"; grep -iE "verdict" -A3 "$OUT/probe.txt" | tail -8
fi
[ "${PACK_CACHE:-1}" = 1 ] && tar -C .kcache -czf "$OUT/kcache.tgz" .
