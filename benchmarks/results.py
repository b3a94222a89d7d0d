"""Result files: JSON lines, written after every case.

A file holds one run: the first line is {"type": "run", "suite", "provenance",
"started"}; each following line is {"type": "case", ...} and is flushed as soon
as the case is measured, so an interrupted run keeps what it measured. The same
lines go to every output directory given (e.g. $OUT/benchmarks/results and
benchmarks/results). Every record passes through provenance.sanitize().
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Dict, Iterable, List, Optional

from . import provenance

DEFAULT_DIR = os.path.join(provenance.REPO_ROOT, "benchmarks", "results")


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    try:  # numpy / torch scalars
        return _jsonable(x.item())
    except Exception:
        return str(x)


def from_json_float(x: Any) -> Any:
    if x == "nan":
        return float("nan")
    if x == "inf":
        return float("inf")
    if x == "-inf":
        return float("-inf")
    return x


class ResultWriter:
    """Append-per-case JSON lines writer for one suite."""

    def __init__(self, suite: str, out_dirs: Iterable[str], provenance_record: Dict[str, Any]):
        self.suite = suite
        self.paths: List[str] = []
        dirs = []
        for d in out_dirs:
            if d and os.path.abspath(d) not in [os.path.abspath(x) for x in dirs]:
                dirs.append(d)
        for d in dirs:
            os.makedirs(d, exist_ok=True)
            p = os.path.join(d, f"{suite}.jsonl")
            self.paths.append(p)
        head = {"type": "run", "suite": suite, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "provenance": provenance_record}
        self._write(head, mode="w")
        self.count = 0

    def _write(self, record: Dict[str, Any], mode: str = "a") -> None:
        line = json.dumps(_jsonable(provenance.sanitize(record)), sort_keys=False)
        for p in self.paths:
            with open(p, mode) as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())

    def case(self, record: Dict[str, Any]) -> None:
        rec = {"type": "case", "suite": self.suite}
        rec.update(record)
        self._write(rec)
        self.count += 1

    def note(self, record: Dict[str, Any]) -> None:
        rec = {"type": "note", "suite": self.suite}
        rec.update(record)
        self._write(rec)


def read_jsonl(path: str) -> Dict[str, Any]:
    """Return {"run": header or None, "cases": [...], "notes": [...]}; tolerates a
    truncated last line (an interrupted run)."""
    run, cases, notes = None, [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            t = rec.get("type")
            if t == "run":
                run = rec
            elif t == "case":
                cases.append(rec)
            elif t == "note":
                notes.append(rec)
    return {"run": run, "cases": cases, "notes": notes}


def load_suite(suite: str, results_dir: Optional[str] = None) -> Optional[Dict[str, Any]]:
    p = os.path.join(results_dir or DEFAULT_DIR, f"{suite}.jsonl")
    if not os.path.exists(p):
        return None
    return read_jsonl(p)
