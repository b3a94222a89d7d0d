#!/usr/bin/env bash
# Session 18 (after split2-cuts3: the value dtype is split2's first template argument). A profile call for the decode's screened split (notes/decode.md sections 20, 24 and 25): ncu
# `--set full` with source counters of split2 at B128 L4K (its SA form) and B1 L32K, and of the
# dense ring at B128, on the protocol cache (decode_kernel_times.py builds it), one launch each;
# then the stall table and the per-source-line counts per key. LIB: the library to profile
# (default .gpu-libs/main/libfold_attention.so, as next_round.sh lays libraries out).
#   OUT=$OUT bash notes/prepared/s18_profile.sh      (about 5 minutes)
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
mkdir -p .gpu-libs/cuts3 && xz -dc .ab/cuts3.so.xz > .gpu-libs/cuts3/libfold_attention.so
cp .ab/cuts3.commit .gpu-libs/cuts3/commit
LIB=${LIB:-$PWD/.gpu-libs/cuts3/libfold_attention.so}
mkdir -p "$OUT/logs"
prof() {  # prof NAME KERNEL_REGEX MANGLED_SUBSTRING SKIP MODE SHAPE KEYS
  local name=$1 kern=$2 sub=$3 skip=$4 mode=$5 shape=$6 keys=$7
  timeout 200 env FOLD_ATTENTION_LIBRARY="$LIB" ncu --set full --import-source yes \
    --kernel-name "regex:$kern" --launch-skip "$skip" --launch-count 1 -f -o "$OUT/$name" \
    python3 scripts/decode_kernel_times.py "$mode" --shapes "$shape" > "$OUT/logs/$name.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/$name.src.csv.gz"
  ncu -i "$OUT/$name.ncu-rep" --page details --csv > "$OUT/$name.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/$name.src.csv.gz" 30 > "$OUT/$name.stalls.txt" 2>&1
  python3 scripts/ncu_source_lines.py "$LIB" "$sub" "$OUT/$name.src.csv.gz" 40 "$keys" \
    > "$OUT/$name.lines.txt" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  echo "== $name: $(head -3 "$OUT/$name.stalls.txt" | tr '\n' ' ')"
}
# keys x KV heads of one launch: B128 L4K H 32/8 -> 128 * 4096 * 8; B1 L32K -> 32768 * 8.
prof split2_b128 decode_split2_kernel decode_split2_kernelILb0ELi2ELi3ELb1ELb0ELi1E 2 --screened-only "128,4096,32,8,128" 4194304
prof split2_b1 decode_split2_kernel decode_split2_kernelILb0ELi2ELi2ELb0ELb0ELi1E 2 --screened-only "1,32768,32,8,128" 262144
# (the ring instance of this shape: check its mangled name in ring_b128.details.csv first)
prof ring_b128 decode_split_ring decode_split_ring_kernel 2 --dense-only "128,4096,32,8,128" 4194304
# the front at B1 (one row per block: the step's critical path) and at B128 (eight rows per block)
prof front_b1 decode_front_kernel decode_front_kernelILi4ELb1EE 2 --screened-only "1,32768,32,8,128" 32
prof front_b128 decode_front_kernel decode_front_kernelILi4ELb0EE 2 --screened-only "128,4096,32,8,128" 4096
prof combine_b1 decode_combine_kernel decode_combine_kernel 2 --screened-only "1,32768,32,8,128" 32
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
