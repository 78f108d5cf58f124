# Sourced by the GPU machine's scripts (bench/gpu_run.sh, bench/sanitize.sh), from the
# repository root: NVIDIA's wheels in .whl/ (nvmath-python for cuBLAS and cuSOLVER,
# nccl4py), where present, installed into /tmp/site; PYTHONPATH to them and this tree's src/.
if [ -z "${VRAM_WHEELS_DONE:-}" ] && compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || return 1
    export VRAM_WHEELS_DONE=1  # (scripts this one runs need not install them again)
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
