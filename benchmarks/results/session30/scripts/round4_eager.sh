#!/usr/bin/env bash
# Session 30, round 4: the eager step's host path (package only; library m30 = main 9830c59).
# Changes against 3b3ea0f's package: the cache's C descriptor built once (not twice per step),
# page reservation without a walk over the request's pages, the device check skipped for tensors
# on the cache's own device. 1. Every GPU decode test with the new package. 2. Eager step time
# (scripts/decode_eager_step.py), the old package (.ab/oldpkg-3b3ea0f.tar.xz) and the new one in
# alternating processes, twice each; cProfile of the new one. 3. The generate suite (eager steps
# against SDPA's), published.
#   OUT=$OUT bash benchmarks/results/session30/scripts/round4_eager.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m30
X=$(L m30)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
OLD=$(mktemp -d) && tar -C "$OLD" -xJf .ab/oldpkg-3b3ea0f.tar.xz
R=$(mktemp -d)/r4 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r4.tgz" -C "$(dirname "$R")" r4 -C "$(dirname "$LOGS")" logs; }
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
pack
NEWP=$PYTHONPATH
OLDP=$OLD/python:$PWD/scripts:$PWD
for r in 1 2; do
  step eager_old$r 150 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$OLDP python3 scripts/decode_eager_step.py
  step eager_new$r 150 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$NEWP python3 scripts/decode_eager_step.py
  for a in old new; do sed "s/^/$a$r: /" "$LOGS/eager_$a$r.log" | grep "B=" >> "$R/eager.txt"; done
done
step eager_profile 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_eager_step.py --profile \
  --shapes "1,8192,9,3,64" --rounds 2
cp "$LOGS/eager_profile.log" "$R/eager_profile.txt"
cat "$R/eager.txt" >> "$OUT/summary.txt"
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step gen 200 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only generate --budget-s 150 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 40
