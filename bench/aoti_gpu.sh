#!/usr/bin/env bash
# Issue 33 on the GPU machine, in one call: compile the AOTInductor packages (torch), run
# vram.aoti's and the Triton bridge's GPU tests (torch-free processes), the benchmark.
#
#   bash bench/aoti_gpu.sh          (AOTI_BENCH=0: the export and the tests, no benchmark)
#
# Writes to $OUT (at most 8 files, flat): aoti-export.txt, aoti-tests.txt (with the Triton
# checks' reports), aoti-bench.txt, the benchmark's JSON, and aoti-packages.tar (the
# export's logs, manifest and nm lists; no binaries). The packages are built once into $VRAM_AOTI_MODELS
# (default /tmp/vram-aoti-models) and reused by the tests and the benchmark. nvmath-python
# comes from .whl/ where present (as bench/gpu_run.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vram-out}
MODELS=${VRAM_AOTI_MODELS:-/tmp/vram-aoti-models}
mkdir -p "$OUT" "$MODELS"
if [ -z "${VRAM_WHEELS_DONE:-}" ] && compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 VRAM_AOTI_MODELS=$MODELS
start=$SECONDS

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  python3 bench/aoti_export.py "$MODELS"; } > "$OUT/aoti-export.txt" 2>&1
echo "export: $((SECONDS - start)) s"; tail -8 "$OUT/aoti-export.txt"

python3 -m pytest -q -p no:cacheprovider -m gpu -rs -s \
    tests/gpu/test_aoti_gpu.py tests/gpu/test_triton_gpu.py > "$OUT/aoti-tests.txt" 2>&1
echo "tests: $((SECONDS - start)) s"; grep -E "^(FAILED|ERROR)|passed|failed|triton_check" "$OUT/aoti-tests.txt" | tail -20

if [ "${AOTI_BENCH:-1}" = 1 ]; then
    python3 bench/aoti.py --models "$MODELS" --out "$OUT" > "$OUT/aoti-bench.txt" 2>&1
    echo "bench: $((SECONDS - start)) s"; grep -E "summary|FAILED|wrote" "$OUT/aoti-bench.txt" | tail -12
fi

tar -C "$MODELS" -cf "$OUT/aoti-packages.tar" --exclude='*.pt2' --exclude='*.npy' .
