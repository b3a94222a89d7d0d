export FOLD_ATTENTION_LIBRARY=$PWD/.gpu/libfold_attention.so PYTHONPATH=$PWD/python:$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -m gpu -p no:logging --maxfail=10 tests/python > $OUT/pytest_gpu.log 2>&1; tail -15 $OUT/pytest_gpu.log | grep -vE "^\s*$|warn|Deprec"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py > $OUT/memcheck.log 2>&1; tail -1 $OUT/memcheck.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py > $OUT/racecheck.log 2>&1; tail -1 $OUT/racecheck.log
timeout 120 python3 scripts/decode_bench.py > $OUT/dec.log 2>&1; grep -E "SDPA|fold" $OUT/dec.log | cut -c1-140
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --clock-control none"
timeout 120 ncu $S -k regex:decode_split --launch-skip 2 --launch-count 1 -o $OUT/split_b32 python3 scripts/decode_bench.py --profile --shape 1 > $OUT/ncu_split.log 2>&1; tail -1 $OUT/ncu_split.log
timeout 60 ncu -i $OUT/split_b32.ncu-rep --page source --csv --print-source sass > $OUT/split_src.csv 2>&1
timeout 60 ncu -i $OUT/split_b32.ncu-rep > $OUT/split_details.txt 2>&1; grep -E "Duration|Executed Ipc|Issue Slots|Warp Cycles Per Issued" $OUT/split_details.txt
cd $OUT && rm -f split_b32.ncu-rep && tar czf ../r3.tgz . && rm -rf ./* && mv ../r3.tgz .
