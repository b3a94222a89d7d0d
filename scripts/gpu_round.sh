#!/usr/bin/env bash
# One GPU round, on the GPU machine, in one go: SASS check, C++ tests, GPU pytest, the
# compute-sanitizer checks, quick timings, then the benchmarks. Expects .gpu/ from
# build_gpu_bundle.sh (and optionally wheels in .whl/). Writes logs to $OUT (or ./gpu-out)
# and prints a summary. Every step has a time limit, so a round fits a device lease.
#   usage: bash scripts/gpu_round.sh [--no-bench] [--gpu-tests-only] [--bench-args "..."] [--decode]
#          [--variants] [--timings]
#   --variants: the opt-in kernel variants (FOLD_FWD_VARIANT=v1.2, FOLD_BWD_VARIANT=v1;
#               ROUND_FWD_VARIANT / ROUND_BWD_VARIANT pick others)
#               under the sanitizers (the GPU suite's variant tests already compare their
#               bits with the defaults').
#   --timings:  quick timings (not the benchmark protocol): decode_bench.py,
#               decode_step_latency.py, the forward and backward variants side by side.
#   --decode:   only the decode work: its GPU tests, the sanitizers, decode_bench.py and
#               decode_step_latency.py (about 3 minutes; no C++ tests, no training timings).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
bench=1
all_tests=1
variants=0
timings=0
decode=0
bench_args="--quick"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --gpu-tests-only) all_tests=0 ;;
    --bench-args) bench_args="$2"; shift ;;
    --variants) variants=1 ;;
    --timings) timings=1 ;;
    --decode) decode=1 ;;
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
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $out/NAME.log
  local name=$1 limit=$2; shift 2
  echo "== $name: $*"
  if timeout "$limit" "$@" >"$out/$name.log" 2>&1; then echo "   ok"; else echo "   FAILED (rc=$?)"; status=1; fi
  tail -n 15 "$out/$name.log" | sed 's/^/   | /'
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
echo "commit: $(cat .gpu/commit 2>/dev/null)"
cp .gpu/ptxas.txt "$out/ptxas.txt" 2>/dev/null
if [ "$decode" = 1 ]; then
  step pytest_decode 200 python3 -m pytest -q -m gpu -p no:logging --maxfail=10 tests/python \
    -k "decode or kvcache or cache"
  step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py
  step racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py
  step decode_bench 150 python3 scripts/decode_bench.py
  step decode_step_latency 120 python3 scripts/decode_step_latency.py
  echo "gpu round (decode): $([ $status = 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
  exit $status
fi
step sass 120 bash -c "cuobjdump --dump-sass .gpu/libfold_attention.so > '$out/sass.txt' && \
  echo 'SASS instruction counts:' && \
  grep -oE '(LDG\.E\.128|LDG\.E[^ ;]*|HGMMA[^ ;]*|QGMMA[^ ;]*|UTMALDG[^ ;]*|UBLKRED[^ ;]*|ATOMG[^ ;]*|RED[^ ;]*|STL|LDL)' '$out/sass.txt' | sort | uniq -c"
step cpp_tests 120 .gpu/fold_tests
step pytest_gpu 300 python3 -m pytest -q -m gpu -p no:logging --maxfail=25 tests/python
[ "$all_tests" = 1 ] && step pytest_all 300 python3 -m pytest -q tests/python
if command -v compute-sanitizer >/dev/null; then
  step memcheck 180 compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py
  step racecheck 180 compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py
  if [ "$variants" = 1 ]; then
    for tool in memcheck racecheck synccheck; do
      step "${tool}_variants" 180 env FOLD_FWD_VARIANT="${ROUND_FWD_VARIANT:-v1.2}" FOLD_FWD_CTAS=2 \
        FOLD_BWD_VARIANT="${ROUND_BWD_VARIANT:-v1}" \
        compute-sanitizer --tool "$tool" --error-exitcode 1 python3 scripts/gpu_smoke.py
    done
  fi
fi
if [ "$timings" = 1 ]; then
  step decode_bench 150 python3 scripts/decode_bench.py
  step decode_step_latency 120 python3 scripts/decode_step_latency.py
  [ -f scripts/time_backward_variants.py ] && step time_bwd_variants 150 python3 scripts/time_backward_variants.py
  step time_fwd_variants 150 python3 scripts/time_forward_variants.py --graph v1.1 v1.2
fi
step bench_preprocess 60 python3 -m benchmarks.preprocess --out "$out"
if [ "$bench" = 1 ]; then
  # shellcheck disable=SC2086
  step bench 900 python3 -m benchmarks.run_all $bench_args --out "$out"
fi
echo "gpu round: $([ $status = 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
exit $status
