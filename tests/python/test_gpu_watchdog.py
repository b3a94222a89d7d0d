"""The GPU tests' watchdog (conftest.py): a gpu-marked test that outlives its module's
TIME_LIMIT_S ends the process, and the log names the test and holds its stack. Runs on the CPU
(a pytest subprocess over a test that sleeps)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

HANGING = '''
import time
import pytest
pytestmark = pytest.mark.gpu
TIME_LIMIT_S = 1
def test_hangs():
    time.sleep(30)
def test_not_reached():
    pass
'''


def test_a_hanging_gpu_test_is_ended_and_named(tmp_path):
    (tmp_path / "test_hanging.py").write_text(HANGING)
    log = tmp_path / "watchdog.log"
    env = dict(os.environ, FOLD_GPU_WATCHDOG_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "conftest", str(tmp_path / "test_hanging.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    text = log.read_text()
    assert "test_hanging.py::test_hangs: time limit 1 s" in text
    assert "in test_hangs" in text  # the stack of the hung test
    assert "passed" not in run.stdout  # the process ended inside the first test
