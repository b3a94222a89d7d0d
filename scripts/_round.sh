export FOLD_ATTENTION_LIBRARY=$PWD/.gpu/libfold_attention.so PYTHONPATH=$PWD/python:$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -m gpu -p no:logging -x tests/python > $OUT/pytest_gpu.log 2>&1; tail -3 $OUT/pytest_gpu.log
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py > $OUT/memcheck.log 2>&1; tail -2 $OUT/memcheck.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py > $OUT/racecheck.log 2>&1; tail -2 $OUT/racecheck.log
timeout 120 python3 scripts/decode_bench.py > $OUT/dec.log 2>&1; grep -E "SDPA|fold" $OUT/dec.log | cut -c1-150
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis --clock-control none"
timeout 150 ncu $S -k regex:decode_split --launch-skip 2 --launch-count 1 -o $OUT/split_b32 python3 scripts/decode_bench.py --profile --shape 1 > $OUT/ncu_split.log 2>&1; tail -2 $OUT/ncu_split.log
timeout 60 ncu -i $OUT/split_b32.ncu-rep --page source --csv --print-source sass > $OUT/split_src.csv 2>&1; wc -c $OUT/split_src.csv; head -c 600 $OUT/split_src.csv
timeout 100 ncu --section SpeedOfLight --section WarpStateStats --clock-control none -k regex:"decode_(front|combine)" --launch-skip 2 --launch-count 4 python3 scripts/decode_bench.py --profile --shape 0 > $OUT/ncu_front.log 2>&1; grep -E "decode_|Duration" $OUT/ncu_front.log | cut -c1-120
cd $OUT && tar czf ../r2.tgz . && rm -rf ./* && mv ../r2.tgz .
