#!/usr/bin/env bash
# Prepared in session 29, NOT RUN: the dense ring waiting per item for its rows' readiness flags
# instead of for the whole front (FOLD_DECODE_ZFLAGS=1, opt-in;
# patches/decode-zflags-prepared.patch, `git am` on main at 7093351 or later). Library: build it
# and carry it as .ab/zf1.so.xz (with .ab/zf1.commit). It also holds main's split2 fix of
# 7093351 (a split without keys waits for the front), which had not run on the H200 either:
# the default-path checks below are that fix's run.
# Why: with FOLD_DECODE_OVERLAP (session 29, merged) the ring's blocks start once every front
# block has started and stream their first stages, then wait for the whole front. At large
# batch the front runs in two waves (~37-44 us at B128 L4K, notes/decode.md section 33), so the
# ring stalls for most of the second wave. With ZFLAGS the front resets the item counter and its
# rows' flags before it lets the ring start, sets each row's flag (release, GPU scope) once the
# row's q planes, sq and Z are written (by the warp that wrote them), and resets the group's
# read counters at its start instead of its end; the ring's producer issues an item's first stage's copies,
# polls the item's rows (acquire), then arrives on that stage (expect_tx first, the arrival after
# the poll), so the copies fly while it polls; items without keys are not polled; the ring waits
# for the front's completion only at its end (so the combine and pass 1 still follow the front).
# A read-only review (session 29) found a hang in the first version (empty items polled in the
# one-block-per-item grid: the front sets no flag for a request without keys) and that the first
# version gave up OVERLAP's early stages; both fixed in this patch (compiled only).
# Prediction: B128 L4K dense -2 to -4% (up to half the front's time), B32 -1%, B1 unchanged
# (its front is one wave); the same bits (hashes, the decode suite with ZFLAGS=1).
# ptxas: no new spills (the D 128 front even loses main's 4-byte spill in its large-batch form): the
# flags are set per row by the warp that wrote it, and the group's counters reset at the start.
#   OUT=$OUT bash benchmarks/results/session29/scripts/next_round_zflags.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh zf1
X=$(L zf1)
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
chk decode_tests_zflags 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_ZFLAGS=1 python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_decode.py
for v in 0 1; do
  step hash_zflags$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_ZFLAGS=$v python3 scripts/decode_hashes.py \
    --depths none,16
  cp "$LOGS/hash_zflags$v.log" "$OUT/hash_zflags$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_zflags0.txt") <(grep -v "^==" "$OUT/hash_zflags1.txt"); then
  echo "== hashes zflags 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes zflags 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_ZFLAGS=1 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
# Graphed interleaved A/B, both arm orders (session 29 round 5: the first-captured arm can be
# 3-7% faster at some shapes whichever it is).
SHP="1,32768,32,8,128;1,8192,9,3,64;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;64,4096,16,4,64;32,32768,32,2,128"
for o in "-,1" "1,-"; do
  n=ab_zflags_${o/,/_}
  step $n 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_ZFLAGS \
    --values "$o" --rounds 7 --dense-only --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_zflags.txt"
done
echo "== next round checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40; cat "$OUT/ab_zflags.txt"
