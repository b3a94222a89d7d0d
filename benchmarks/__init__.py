"""FoldAttention benchmark suite.

Every script runs as ``python -m benchmarks.<name>`` from the repository root.
The measuring protocol is described in ``benchmarks/README.md``.
"""
