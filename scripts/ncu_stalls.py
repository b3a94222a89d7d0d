"""Summarises the SASS source page of an ncu report (`ncu -i X.ncu-rep --page source --csv
--print-source sass`, plain or gzipped): warp-stall samples by reason, the instructions with the
most samples, and the shared-memory instructions with the most excess (bank-conflict) wavefronts.

    python3 scripts/ncu_stalls.py source.csv[.gz] [top]
"""
import csv
import gzip
import io
import sys


def rows(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as raw:
        lines = raw.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise SystemExit(f"{path}: no SASS source table (expected ncu --page source --csv output)")
    data = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    if not data:
        raise SystemExit(f"{path}: the source table is empty")
    return data


def num(x):
    try:
        return float(x.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    data = rows(path)
    reasons = [c for c in data[0] if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in data)
    print(f"all samples {int(total)}")
    sums = {c: sum(num(r[c]) for r in data) for c in reasons}
    for c, s in sorted(sums.items(), key=lambda kv: -kv[1]):
        if s > 0.005 * total:
            print(f"{c:28s} {int(s):9d} {100 * s / total:5.1f}%")
    print(f"\ntop {top} instructions by samples (address, samples, share, main reason, SASS)")
    data.sort(key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))
    for r in data[:top]:
        n = num(r["Warp Stall Sampling (All Samples)"])
        why = max(reasons, key=lambda c: num(r[c]))
        print(f"{r['Address'][-5:]} {int(n):8d} {100 * n / total:4.1f}% {why[6:]:14s} {r['Source'].strip()[:70]}")
    key = "L1 Wavefronts Shared Excessive"
    if key in data[0]:
        exc = sorted(data, key=lambda r: -num(r[key]))
        tot = sum(num(r["L1 Wavefronts Shared"]) for r in data)
        print(f"\nshared wavefronts {int(tot)}, excessive {int(sum(num(r[key]) for r in data))}; top:")
        for r in exc[:10]:
            if num(r[key]) > 0:
                print(f"{r['Address'][-5:]} excess {int(num(r[key])):11d} of {int(num(r['L1 Wavefronts Shared'])):11d}"
                      f"  {r['Source'].strip()[:70]}")


if __name__ == "__main__":
    main()
