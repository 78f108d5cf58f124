#!/usr/bin/env bash
# compute-sanitizer on the GPU machine (an H100: sm_90, nvcc and compute-sanitizer there):
#
#   bash bench/sanitize.sh [tests]   the GPU tests of vram's own kernels under memcheck,
#                                    racecheck, synccheck and initcheck, the runs at once,
#                                    about 8 minutes (bench/sanitize/suite.py: --seconds S for
#                                    each run's limit, --only NAME,... for some runs)
#   bash bench/sanitize.sh probe     is the memcheck report on the LU cluster panels the
#                                    kernel's or the tool's? about 3 minutes, one verdict
#                                    (bench/sanitize/cluster_probe.py)
#
# Each writes its JSON to bench/results/ and $OUT (default /tmp/vram-sanitize, with the
# logs), prints a table, and exits 0 only when the tools found nothing unexplained.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/vram-sanitize}
mkdir -p "$OUT"
source bench/_gpu_env.sh || exit 1
case "${1:-tests}" in
tests) [ $# -gt 0 ] && shift; exec python3 bench/sanitize/suite.py "$@" ;;
probe) shift; exec python3 bench/sanitize/cluster_probe.py "$@" ;;
*)
    echo "usage: bash bench/sanitize.sh [tests [--seconds S] [--only NAME,...] | probe]" >&2
    exit 2
    ;;
esac
