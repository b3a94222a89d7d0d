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
