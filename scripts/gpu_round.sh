#!/usr/bin/env bash
# One GPU round, on the GPU machine, in one go: SASS check, C++ tests, GPU pytest, the
# compute-sanitizer checks, then the benchmarks. Expects .gpu/ from build_gpu_bundle.sh
# (and optionally wheels in .whl/). Writes logs to $OUT (or ./gpu-out) and prints a summary.
#   usage: bash scripts/gpu_round.sh [--no-bench] [--gpu-tests-only] [--bench-args "..."]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
bench=1
all_tests=1
bench_args="--quick"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --gpu-tests-only) all_tests=0 ;;
    --bench-args) bench_args="$2"; shift ;;
  esac
  shift
done
export PYTHONUNBUFFERED=1
export FOLD_ATTENTION_LIBRARY="$PWD/.gpu/libfold_attention.so"
export PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
status=0
step() {  # step NAME COMMAND...: run, log to $out/NAME.log, remember failures
  local name=$1; shift
  echo "== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then echo "   ok"; else echo "   FAILED (rc=$?)"; status=1; fi
  tail -n 15 "$out/$name.log" | sed 's/^/   | /'
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
echo "commit: $(cat .gpu/commit 2>/dev/null)"
cp .gpu/ptxas.txt "$out/ptxas.txt" 2>/dev/null
step sass bash -c "cuobjdump --dump-sass .gpu/libfold_attention.so > '$out/sass.txt' && \
  echo 'per-kernel SASS instruction counts:' && \
  grep -oE '(LDG\.E\.128|LDG\.E[^ ;]*|HGMMA[^ ;]*|QGMMA[^ ;]*|ATOMG[^ ;]*|RED[^ ;]*|STL|LDL)' '$out/sass.txt' | sort | uniq -c"
step cpp_tests .gpu/fold_tests
step pytest_gpu python3 -m pytest -q -m gpu -p no:logging --maxfail=25 tests/python
# The opt-in persistent forward (v1.2) through the whole GPU suite (tests that pick a
# variant themselves override it), and under the sanitizers with 2 CTAs walking every tile.
step pytest_gpu_fwd_v12 env FOLD_FWD_VARIANT=v1.2 \
  python3 -m pytest -q -m gpu -p no:logging --maxfail=25 tests/python
[ "$all_tests" = 1 ] && step pytest_all python3 -m pytest -q tests/python
if command -v compute-sanitizer >/dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py
  for tool in memcheck racecheck synccheck; do
    step "${tool}_fwd_v12" env FOLD_FWD_VARIANT=v1.2 FOLD_FWD_CTAS=2 \
      compute-sanitizer --tool "$tool" --error-exitcode 1 python3 scripts/gpu_smoke.py
  done
fi
step time_fwd_variants python3 scripts/time_forward_variants.py v1.1 v1.2
step time_fwd_variants_graph python3 scripts/time_forward_variants.py --graph v1.1 v1.2
step bench_preprocess python3 -m benchmarks.preprocess --out "$out"
if [ "$bench" = 1 ]; then
  # shellcheck disable=SC2086
  step bench python3 -m benchmarks.run_all $bench_args --out "$out"
fi
echo "gpu round: $([ $status = 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
exit $status
