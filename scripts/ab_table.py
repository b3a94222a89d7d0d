"""One line per case of a benchmarks.backward / benchmarks.forward jsonl: TFLOP/s and the
repeat-bits flag of every fold arm (the default and each FOLD_BENCH_VARIANTS variant), then the
fastest nondeterministic arm, and each variant's ratio to the default. For in-process A/B runs.

    python3 scripts/ab_table.py results.jsonl
"""
import json
import sys


def main(path):
    for line in open(path):
        rec = json.loads(line)
        if rec.get("type") != "case":
            continue
        arms = rec.get("arms", {})
        fold = {k: a for k, a in arms.items() if a.get("arm") == "fold" and "tflops" in a}
        others = [(a["tflops"], k) for k, a in arms.items()
                  if a.get("arm") != "fold" and "tflops" in a and not a.get("deterministic_mode")]
        cells = [f"{k} {a['tflops']:.1f} bits={a.get('repeat_identical')}" for k, a in fold.items()]
        base = fold.get("fold", {}).get("tflops")
        if base:
            cells += [f"{k}/fold {a['tflops'] / base:.3f}" for k, a in fold.items() if k != "fold"]
        if others:
            best = max(others)
            cells.append(f"{best[1]} {best[0]:.1f}")
        print(f"{rec['case']} | " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
