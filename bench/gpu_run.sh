#!/usr/bin/env bash
# One call on the GPU machine: GPU tests, then every benchmark. Results and logs go to $OUT
# (and the JSON results also to bench/results/ there, to be copied back and committed).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/vram-out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -m vram info; } \
    2>&1 | tee "$OUT/info.txt"
python3 -m vram demo 2>&1 | tee "$OUT/demo.txt"
python3 -m pytest -q -m gpu tests -p no:cacheprovider -rs 2>&1 | tee "$OUT/gpu-tests.txt"
for bench in ${BENCHES:-alloc streams}; do
    [ -f "bench/$bench.py" ] && python3 "bench/$bench.py" --out "$OUT" 2>&1
done
ls -la "$OUT"
