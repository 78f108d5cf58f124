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
#    AOTInductor's (bench/aoti_gpu.sh runs those, with their export), until $TEST_SECONDS
#    (default 420) have gone, so that the call ends inside its limit;
# 3. the kernel cache packed again into $OUT/kcache.tgz for the next call to carry.
# With PROBE=1 the LU cluster probe (bench/sanitize.sh probe) runs beside the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vram-out}
mkdir -p "$OUT" .kcache
source bench/_gpu_env.sh || exit 1
export VRAM_CACHE_DIR=$PWD/.kcache
[ -f .kcache.tgz ] && tar -C .kcache -xzf .kcache.tgz
start=$SECONDS
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -m vram info; } > "$OUT/info.txt" 2>&1
python3 -m vram.ops.warm -j "$(nproc)" > "$OUT/warm.txt" 2>&1
echo "warm: $((SECONDS - start)) s: $(tail -3 "$OUT/warm.txt" | tr '\n' ' ' | cut -c1-400)"
if [ "${PROBE:-0}" = 1 ]; then
    bash bench/sanitize.sh probe > "$OUT/probe.txt" 2>&1 &
    probe=$!
fi
if [ $# -gt 0 ]; then
    files=("$@")
else  # the engine first, the libraries, the runtime, the newest kernels last
    files=()
    for name in tensor_gpu pointwise_gpu reduce_gpu index_gpu random_gpu blas_gpu linalg_gpu \
        optim_gpu graphs_gpu memory_gpu streams_gpu cuda_driver async_backend_gpu doctor_gpu \
        snapshot_torch interop_plugins sanitizer_gpu multi_gpu triton_gpu attention_gpu; do
        files+=("tests/gpu/test_${name}.py")
    done
fi
budget=${TEST_SECONDS:-420}
: > "$OUT/gpu-tests.txt"
for file in "${files[@]}"; do
    left=$((budget - (SECONDS - start)))
    if [ "$left" -le 5 ]; then
        echo "NOT RUN (out of time): $file" | tee -a "$OUT/gpu-tests.txt"
        continue
    fi
    t0=$SECONDS
    { echo "=== $file"; timeout "$left" python3 -m pytest -q -m gpu "$file" -p no:cacheprovider \
        -rs --durations=5 2>&1; } >> "$OUT/gpu-tests.txt"
    echo "$file: $((SECONDS - t0)) s: $(tail -1 "$OUT/gpu-tests.txt" | cut -c1-150)"
done
grep -E "^(FAILED|ERROR)" "$OUT/gpu-tests.txt" | head -60
if [ -n "${probe:-}" ]; then
    wait "$probe"
    echo "probe: $((SECONDS - start)) s"; grep -iE "verdict" -A3 "$OUT/probe.txt" | tail -8
fi
tar -C .kcache -czf "$OUT/kcache.tgz" .
