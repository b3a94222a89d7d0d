"""CPU tests of the benchmark suite's pieces (no GPU, no model, seconds)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
# the suites' code paths run here as a CPU dry run (SDPA math backend, wall-clock timing)
os.environ.setdefault("FOLD_BENCH_DEVICE", "cpu")
