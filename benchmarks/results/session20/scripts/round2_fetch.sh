#!/usr/bin/env bash
# Session 20's call for split2's fetching blocks (decode_split2.cuh FETCH, decode_fetch.cuh),
# about 5 minutes. Library, xz-compressed at .ab/fetch.so.xz with its commit in .ab/fetch.commit.
# The whole decode GPU suite (the new test_decode_split2_blocks_same_bits included), racecheck /
# synccheck / memcheck of the decode smoke with two fetching split2 blocks (racecheck also with
# plane A through shared memory), the interleaved graphed A/B of the default (fetching where the
# grid is large) against one block per item, depth 16, on full caches and on caches of 8x the
# length's capacity.
#   OUT=$OUT bash notes/prepared/next_round_fetch.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh fetch
X=$(L fetch)
fail=0
chk() { step "$@"; tail -n 4 "$OUT/summary.txt" | grep -q "^== $1 rc=0 " || fail=1; }
chk decode_suite 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
for tool in racecheck synccheck memcheck; do
  chk ${tool}_f2 75 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT2_BLOCKS=2 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
chk racecheck_f2sa 75 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT2_BLOCKS=2 \
  FOLD_DECODE_SPLIT2_SA=1 compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
SSH="128,4096,32,8,128;32,8192,32,8,128;8,16384,32,8,128;16,16384,32,4,128;32,32768,32,2,128;32,16384,16,2,64;64,4096,16,2,64;1,32768,32,8,128"
step fetch_ab 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT2_BLOCKS --values "0,-" --screened-only --shapes "$SSH" --rounds 9
cat "$LOGS/fetch_ab.log" >> "$OUT/summary.txt"
step fetch_ab_spare 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT2_BLOCKS --values "0,-" --screened-only --spare 8 --rounds 7 \
  --shapes "128,4096,32,8,128;32,4096,16,2,64;16,8192,32,2,128;8,4096,32,4,128"
cat "$LOGS/fetch_ab_spare.log" >> "$OUT/summary.txt"
echo "== fetch checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
