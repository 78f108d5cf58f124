#!/usr/bin/env bash
# A session's GPU work in one device call: the GPU tests (bench/gpu_validate.sh), then the
# benchmarks (bench/gpu_bench.sh; BEFORE=DIR as there), with every log and JSON result
# packed into $OUT/all.tar every 15 s and at the end: the device tool brings back at most
# eight files, and what a call stopped at its limit had written still comes back.
#
# With AOTI=1, bench/aoti_gpu.sh (issue 33: the AOTInductor export, its torch-free tests and
# benchmark) runs beside the tests, from $AOTI_DELAY seconds on (default 45: after the
# kernel cache is warm), for at most $AOTI_SECONDS (default 300), and is waited for before
# the benchmarks start. BENCH=0 leaves the benchmarks out; GPU_TESTS="FILE ..." runs those
# test files (one after another) instead of every one.
#
#   TEST_SECONDS=320 STEP_SECONDS=70 BEFORE=$PWD/.before/src bash bench/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/_gpu_env.sh || exit 1  # the wheels once, for every script below
back=${OUT:-/tmp/vram-out}
export OUT=/tmp/vram-logs
mkdir -p "$back" "$OUT" /tmp/vram-results
pack() {
    tar -C /tmp -cf "$back/.all.tar" vram-logs vram-results 2>/dev/null \
        && mv "$back/.all.tar" "$back/all.tar"
}
(while sleep 15; do pack; done) &
packer=$!
if [ "${AOTI:-0}" = 1 ]; then
    (sleep "${AOTI_DELAY:-45}"
     timeout "${AOTI_SECONDS:-300}" bash bench/aoti_gpu.sh > "$OUT/aoti-run.txt" 2>&1
     echo "aoti: exit $?"; cat "$OUT/aoti-run.txt") &
    aoti=$!
fi
# shellcheck disable=SC2086  # (GPU_TESTS: test files, word-split on purpose; all if unset)
TEST_SECONDS=${TEST_SECONDS:-320} PACK_CACHE=0 bash bench/gpu_validate.sh ${GPU_TESTS:-}
[ -n "${aoti:-}" ] && wait "$aoti"
[ "${BENCH:-1}" = 1 ] && bash bench/gpu_bench.sh
kill "$packer"
pack
