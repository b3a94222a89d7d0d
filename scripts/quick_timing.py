"""What the quick timing scripts share (scripts/time_*.py; not the benchmark protocol): the
benchmark's training shapes, an eager, warm-L2 median timer and the settings selector."""
import os

import torch

SHAPES = [  # (B, S, H, Hkv, D): the training benchmark's shapes
    (2, 8192, 32, 8, 128),
    (4, 4096, 32, 8, 128),
    (8, 2048, 16, 16, 128),
    (8, 2048, 32, 32, 64),
    (2, 8192, 64, 8, 64),
    (16, 1024, 32, 8, 128),
]


def env_cases(name, default):
    """The integer tuples in environment variable `name` ("a,b,...;a,b,...;..."), or
    `default` where it is unset or empty."""
    env = os.environ.get(name, "")
    return [tuple(int(x) for x in c.split(",")) for c in env.split(";") if c] or default


def shapes():
    """SHAPES, or the shapes in FOLD_TIME_SHAPES ("B,S,H,Hkv,D;..."), e.g. a head dim the
    benchmark does not cover."""
    return env_cases("FOLD_TIME_SHAPES", SHAPES)


def timed(fn, iters=10, warmup=3):
    """Median seconds of `fn` over `iters` calls after `warmup`, each timed alone by events."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def select_setting(label, settings):
    """Clears every environment setting in `settings` (names the library reads at each
    call), then applies `label`: "default" = nothing set, NAME=VALUE = that setting (NAME
    must be in `settings`), anything else = the value of settings[0]."""
    for name in settings:
        os.environ.pop(name, None)
    if label == "default":
        return
    name, value = label.split("=", 1) if "=" in label else (settings[0], label)
    if name not in settings:
        raise SystemExit(f"unknown setting {name}: expected one of {settings}")
    os.environ[name] = value
