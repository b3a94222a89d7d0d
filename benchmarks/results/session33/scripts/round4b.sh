#!/usr/bin/env bash
# Session 33, round 4b (round 4 trimmed to fit the device time left: no front8s, no ncu; library s33d: main e5998b1 + the combine's batch from its shared memory,
# FOLD_DECODE_COMBINE_BATCH).
# 0. The decode GPU tests (the new combine-batch bit test included).
# 1. The dense ring's tail at G 16 (B32 L32K H 32/2: 4,096 items over 396 fetching blocks = 10.3
#    rounds, the last third of a round on a third of the blocks) and at B128 L4K (20.7 rounds):
#    FOLD_DECODE_RING_BLOCKS caps the grid (372 = 11.0 rounds at G 16; 390 = 21.0 at B128).
# 2. The front's SMALL instance at 8 rows where groups >= SMs (B128 L4K H 32/8, B64 L4K H 16/4 D 64).
# 3. ncu of the dense ring at G 16 (speed of light, memory, warp states).
#   OUT=$OUT bash benchmarks/results/session33/scripts/round4b.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33d s33c
X=$(L s33d)
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
for n in s33d s33c; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
done
if cmp -s <(grep -v "^==" "$LOGS/hash_s33d.log") <(grep -v "^==" "$LOGS/hash_s33c.log"); then
  echo "== decode hashes s33d = s33c: same" >> "$OUT/summary.txt"
else
  echo "== decode hashes s33d = s33c: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
# 4. The combine's staging batch (64 splits = 64 KB per block at L 32K: 3 blocks per SM, so B32 G 16's
#    512 blocks are 1.3 waves): default / 32 / 16.
step combine_ab 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_COMBINE_BATCH --values "-,32,16" --rounds 9 \
  --shapes "32,32768,32,2,128;1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128"
step ring_blocks 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "-,372,390,264" --dense-only --rounds 9 \
  --shapes "32,32768,32,2,128;128,4096,32,8,128"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -30
grep -v Warn "$LOGS/ring_blocks.log" "$LOGS/combine_ab.log" | tail -24
