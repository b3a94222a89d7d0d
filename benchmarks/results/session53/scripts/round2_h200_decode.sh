#!/usr/bin/env bash
# Session 53: the decode protocol re-run for publication on an H200 (the published decode figures
# are session 37's; split2 and the ring have changed since: sessions 38-53). As session 37's
# round 5: decode, generate and invariance, FlashInfer from .whl/ (benchmarks/fetch_wheels.sh),
# the SmolLM2 capture from .ab/*.pt.xz (python -m benchmarks.make_capture, then xz). Library s53m
# (notes/prepared/build_ab.sh s53m: main with PAIR merged). Exits at once on another GPU. Carry
# .ab/s53m.so.xz, .ab/s53m.commit, .ab/<capture>.pt.xz and .whl:
#   OUT=$OUT bash benchmarks/results/session53/scripts/round2_h200_decode.sh stage|run
# Everything lands in $OUT/r2.tgz (protocol/*.jsonl are what benchmarks/results/ takes).
# The tree (~36 MB tracked) leaves ~28 MB to carry: the library, the capture and the wheels (~41
# MB) do not fit one call. So two calls on one warm machine (it is kept for ~30 s after a call;
# .cache/ is git-ignored, so what the first call leaves there stays for the second):
#   stage (carry .ab/<capture>.pt.xz and .whl): the capture into .cache/captures, the wheels into
#   .cache/site; then run (carry .ab/s53m.so.xz, .ab/s53m.commit): the protocol.
set -u
cd "$(dirname "$0")/../../../.."
part=${1:-}
[ "$part" = stage ] || [ "$part" = run ] || { echo "usage: $0 stage|run" >&2; exit 2; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$OUT/summary.txt" | grep -q H200 ||
  { echo "not an H200" >> "$OUT/summary.txt"; exit 1; }
if [ "$part" = stage ]; then
  mkdir -p .cache/captures
  for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .cache/site \
    .whl/*.whl > /dev/null 2>&1
  ls -la .cache/captures .cache/site | tee -a "$OUT/summary.txt"
  exit 0
fi
ls .cache/captures/*.pt > /dev/null && [ -d .cache/site/flashinfer ] ||
  { echo "no staged capture or wheels: run stage first, on the same machine" | tee -a "$OUT/summary.txt"; exit 1; }
source notes/prepared/round_common.sh s53m
X=$(L s53m)
R=$(mktemp -d)/r2 && mkdir -p "$R/protocol"
step pr 480 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:$PWD/.cache/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 360 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
cp "$R/pr/benchmarks/RESULTS.md" "$R/" 2>/dev/null
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
cp "$OUT/summary.txt" "$R/"
tar czf "$OUT/r2.tgz" -C "$(dirname "$R")" r2 -C "$(dirname "$LOGS")" logs
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 30
grep -h "fastest" "$LOGS"/pr.log | tail -30
exit $fail
