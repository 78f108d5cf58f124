#!/usr/bin/env bash
# The GPU tests of the whole tree in one device call, and the kernel cache carried between
# calls:
#
#   bash bench/gpu_validate.sh [PYTEST ARGS...]
#
# 1. every kernel family ``python -m vram.ops.warm`` knows is compiled on all cores into
#    .kcache/ (unpacked first from .kcache.tgz where a caller carried one);
# 2. every GPU test but AOTInductor's (bench/aoti_gpu.sh runs those, with their export),
#    stopped after $TEST_SECONDS (default 420) so that the call ends inside its limit;
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
echo "warm: $((SECONDS - start)) s: $(tail -1 "$OUT/warm.txt")"
if [ "${PROBE:-0}" = 1 ]; then
    bash bench/sanitize.sh probe > "$OUT/probe.txt" 2>&1 &
    probe=$!
fi
timeout "${TEST_SECONDS:-420}" python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rs \
    --ignore=tests/gpu/test_aoti_gpu.py --durations=25 "$@" > "$OUT/gpu-tests.txt" 2>&1
echo "tests: $((SECONDS - start)) s (exit $?)"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu-tests.txt" | tail -60
if [ -n "${probe:-}" ]; then
    wait "$probe"
    echo "probe: $((SECONDS - start)) s"; grep -iE "verdict|^[A-Z ]+:" "$OUT/probe.txt" | tail -12
fi
tar -C .kcache -czf "$OUT/kcache.tgz" .
