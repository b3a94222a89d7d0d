#!/usr/bin/env bash
# Session 41, fourth device call (diagnostic): is the generate suite's slow eager step (fold
# 263-349 µs on capture layers 2 and 14 against 147-158 on layer 27 in round 3, SDPA 145-168 on
# all three) a property of the layer's data or of its place in the run? The quick suite with the
# layers reversed, then in the default order again; the eager step's host profile.
# Carry [".ab"] holding m41.so.xz, m41.commit and the SmolLM2 capture .pt.xz only (.gpu-store/
# keeps the capture): the tree and the carry must stay under 64 MiB.
set -u
cd "$(dirname "$0")/../../../.."
mkdir -p .cache/captures && xz -dc .ab/smollm2-135m-0172c41b3d659d61.pt.xz \
  > .cache/captures/smollm2-135m-0172c41b3d659d61.pt
source notes/prepared/round_common.sh m41
M=$(L m41)
step gen_reversed 90 env FOLD_ATTENTION_LIBRARY=$M FOLD_GENERATE_LAYERS=27,14,2 \
  python3 -m benchmarks.generate --quick --out "$LOGS/gen_reversed"
step gen_default 90 env FOLD_ATTENTION_LIBRARY=$M python3 -m benchmarks.generate --quick \
  --out "$LOGS/gen_default"
step win_kernels 90 env FOLD_ATTENTION_LIBRARY=$M \
  FOLD_WINDOW_CASES="1,8192,64,8,64,128;2,8192,32,8,128,128;2,8192,32,8,128,4096" \
  python3 scripts/time_window.py --kernels
step eager_profile 60 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_eager_step.py --profile \
  --shapes "1,1983,9,3,64" --steps 64 --rounds 3
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for d in gen_reversed gen_default; do
  python3 - "$LOGS/$d/benchmarks/results/generate.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "arms" in r:
        print(r["case"], {n: round(a.get("us_per_step", -1), 1) for n, a in r["arms"].items()})
PY
done
tail -30 "$LOGS/eager_profile.log"
cat "$LOGS/win_kernels.log"
