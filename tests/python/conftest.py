"""pytest setup: test this checkout's package unless told to test an installed one.

By default the source tree's python/ goes first on sys.path (the library is then found
through FOLD_ATTENTION_LIBRARY or <repo>/build). Set FOLD_ATTENTION_TEST_INSTALLED=1 to
test the fold_attention that pip installed instead.

The decode tests check the screened algorithm at every head dim and group size, so the session
keeps the screen where the planner would read every key instead (FOLD_DECODE_SCREEN=1,
decode_plan.h screen_pays); test_decode_planner.py unsets it to test the planner's choice.
"""

import os
import sys
from pathlib import Path

_PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"
if not os.environ.get("FOLD_ATTENTION_TEST_INSTALLED") and str(_PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(_PYTHON_DIR))

os.environ.setdefault("FOLD_DECODE_SCREEN", "1")

import faulthandler  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# Every GPU test (marked gpu) runs under a hard time limit: a hung kernel blocks inside a CUDA
# call where no Python signal can land, so a watchdog thread dumps the stacks and ends the
# process instead (a hang must not eat the GPU machine's lease). A test module may set its own
# TIME_LIMIT_S. pytest captures file descriptor 2 before this file is imported, and a process the
# watchdog ends prints no report, so the dump goes to a file (FOLD_GPU_WATCHDOG_LOG, by default
# fold_gpu_watchdog.log in the temporary directory) that first names the test.
GPU_TEST_TIME_LIMIT_S = 120
WATCHDOG_LOG = os.environ.get("FOLD_GPU_WATCHDOG_LOG") or os.path.join(
    tempfile.gettempdir(), "fold_gpu_watchdog.log")


@pytest.fixture(autouse=True)
def _gpu_time_limit(request):
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    limit = getattr(request.module, "TIME_LIMIT_S", GPU_TEST_TIME_LIMIT_S)
    with open(WATCHDOG_LOG, "w") as log:
        log.write(f"{request.node.nodeid}: time limit {limit} s\n")
        log.flush()
        faulthandler.dump_traceback_later(limit, exit=True, file=log)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
