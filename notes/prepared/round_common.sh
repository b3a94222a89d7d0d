# Sourced by the next_round_*.sh scripts (from the repository root, with OUT set):
#   source notes/prepared/round_common.sh LIB...
# lays each library .ab/LIB.so.xz into .gpu-libs/LIB/ with its commit file (the benchmarks'
# provenance then names the library's commit), and defines L LIB (the library's path), step
# NAME SECONDS CMD... (runs CMD under a time limit, its output in a log kept outside $OUT, a line
# and the log's tail in $OUT/summary.txt, the logs re-packed into $OUT/logs.tgz after every step,
# so a cut-off call still returns them: the device returns a limited number of files), chk (step,
# recording a failure in $fail), and KT /
# SH, the per-kernel decode times and the six shapes both scripts time.
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
LOGS=$(mktemp -d)/logs && mkdir -p "$LOGS"
for n in "$@"; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit
done
L() { echo "$PWD/.gpu-libs/$1/libfold_attention.so"; }
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$LOGS/$name.log" >> "$OUT/summary.txt"
  tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
}
# chk NAME SECONDS CMD...: step, and fail=1 (initialised here) unless it exited 0.
fail=0
chk() { step "$@"; tail -n 4 "$OUT/summary.txt" | grep -q "^== $1 rc=0 " || fail=1; }
KT="python3 scripts/decode_kernel_times.py --screened-only --shapes"
SH="128,4096,32,8,128;1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;32,32768,32,2,128;32,16384,32,8,64"
# same_logs A B LABEL: "== LABEL: same" in the summary if logs A and B ($LOGS/A.log, $LOGS/B.log)
# agree outside their "==" lines, else "DIFFER" and fail=1 (hash comparisons between libraries).
same_logs() {
  if cmp -s <(grep -v "^==" "$LOGS/$1.log") <(grep -v "^==" "$LOGS/$2.log"); then
    echo "== $3: same" >> "$OUT/summary.txt"
  else
    echo "== $3: DIFFER" >> "$OUT/summary.txt"; fail=1
  fi
}
