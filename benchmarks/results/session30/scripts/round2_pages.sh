#!/usr/bin/env bash
# Session 30, round 2: the cache's page size measured (issue 5 asks for a default of 128 or 256,
# measured; no run had compared them). Library m30 = main 9830c59 (code of 7093351).
# 1. The new GPU tests at page sizes 64 / 256 / 512 against the CPU reference, and dense bits
#    equal across page sizes (tests/python/test_gpu_decode_pages.py).
# 2. scripts/decode_page_sizes.py: per protocol shape and depth (None, 16) one cache per page
#    size (64, 128, 256, 512), graphed and interleaved, with each one's error against fp32 and its
#    read statistics; the real model's captures at L 2K / 8K (every stored layer's error).
#   OUT=$OUT bash benchmarks/results/session30/scripts/round2_pages.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m30
X=$(L m30)
chk page_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -p no:logging \
  tests/python/test_gpu_decode_pages.py
step pages 420 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_page_sizes.py --captures 2048,8192
cp "$LOGS/pages.log" "$OUT/pages.txt"
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -20; cat "$OUT/pages.txt"
