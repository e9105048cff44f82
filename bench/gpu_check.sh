#!/usr/bin/env bash
# The GPU check, for the first minutes on a machine with a GPU: the GPU tests, then the
# generation, weight-sync and precision benchmarks, each printing its JSON lines; everything
# (logs, JSON lines, a summary) under one folder. Budget: 8 minutes on one H200 (the parts'
# ceilings add up to 9: the GPU tests' includes a third whole job, its trainer on the GPU).
#
#   bench/gpu_check.sh [OUT_DIR]          (default runs/gpu_check; PYTHON=... to pick the interpreter)
#
# It installs nothing: run it with a Python that has a CUDA build of torch (and of vLLM for the
# vLLM tests), e.g. an environment made from environment.yml with the CUDA lines uncommented.
# Each part has its own time limit and the script goes on past a failure, so one broken part
# still leaves the others' figures; the summary lists which failed.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu_check}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
MPIRUN=$(dirname "$PY")/mpirun
[ -x "$MPIRUN" ] || MPIRUN=mpirun
failed=()

part() {  # part NAME SECONDS COMMAND...: run it, keep its output, note a failure
    local name=$1 limit=$2; shift 2
    echo "== $name (at most ${limit}s)" | tee -a "$OUT/summary.txt"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    grep -h '^{' "$OUT/$name.log" >>"$OUT/lines.jsonl"
    echo "   exit $rc in $((SECONDS - t0))s; log $OUT/$name.log" | tee -a "$OUT/summary.txt"
    [ "$rc" = 0 ] || failed+=("$name")
}

"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' \
    | tee "$OUT/summary.txt"
part test-gpu 300 "$PY" -m pytest -q --color=no -p no:cacheprovider -rs tests/gpu
part generation 90 "$PY" bench/generation.py --batch 64 --new-tokens 128 --rounds 2
part weight_sync 90 "$MPIRUN" -n 4 --oversubscribe "$PY" bench/weight_sync.py --sizes 25M,100M --no-mpi
part precision 60 "$PY" bench/precision.py --steps 20 --models demo --out "$OUT/precision"
echo "failed: ${failed[*]:-none}" | tee -a "$OUT/summary.txt"
[ ${#failed[@]} = 0 ]
