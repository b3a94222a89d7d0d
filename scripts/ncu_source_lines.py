"""Where a kernel's executed instructions go, by CUDA source line: the SASS source page of an ncu
report (`ncu -i X.ncu-rep --page source --csv --print-source sass`, plain or gzipped) joined with
the line table of the same library's SASS (`nvdisasm -g`; the library must be built with
-lineinfo, as ours is). The ncu rows carry run-time addresses; their offsets from the kernel's
first instruction are the offsets nvdisasm prints.

    python3 scripts/ncu_source_lines.py LIB.so KERNEL_SUBSTRING source.csv[.gz] [top] [keys]

KERNEL_SUBSTRING picks the kernel's mangled name (e.g. decode_split2_kernelILi2ELi3ELb1ELb0E).
The printed source text is read from the files as they are now: run it on the commit the library
was built from, or read the file:line only.
`keys` divides the counts (e.g. keys x KV heads of the profiled launch) to print per-key figures.
cuobjdump and nvdisasm come from PATH, or from the CUOBJDUMP / NVDISASM environment variables.
"""
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from ncu_stalls import rows as ncu_rows  # the source page's table (scripts/)


def tool(name):
    path = os.environ.get(name.upper()) or shutil.which(name)
    if not path:
        raise SystemExit(f"{name} not found: put it on PATH or set {name.upper()}")
    return path


def line_table(lib, kernel):
    """Offset -> (file, line) for the first kernel whose mangled name contains `kernel`."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool("cuobjdump"), "-xelf", "all", os.path.abspath(lib)], cwd=tmp,
                       check=True, capture_output=True)
        for cubin in sorted(glob.glob(os.path.join(tmp, "*.cubin"))):
            syms = subprocess.run(["readelf", "-sW", cubin], capture_output=True, text=True).stdout
            idx = next((ln.split()[0].rstrip(":") for ln in syms.splitlines()
                        if " FUNC " in ln and kernel in ln), None)
            if idx is None:
                continue
            sass = subprocess.run([tool("nvdisasm"), "-fun", idx, "-g", "-c", cubin],
                                  capture_output=True, text=True, check=True).stdout
            table, cur = {}, None
            for ln in sass.splitlines():
                m = re.search(r'//## File "([^"]+)", line (\d+)', ln)
                if m:
                    cur = (m.group(1), int(m.group(2)))
                    continue
                m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+\S", ln)
                if m and cur:
                    table[int(m.group(1), 16)] = cur
            return table
    raise SystemExit(f"no kernel matching {kernel!r} in {lib}")


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    lib, kernel, src = sys.argv[1:4]
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    keys = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    table = line_table(lib, kernel)
    rows = ncu_rows(src)
    base = int(rows[0]["Address"], 16)
    inst, samples = collections.Counter(), collections.Counter()
    unmapped = 0
    for r in rows:
        n = int(r["Instructions Executed"] or 0)
        where = table.get(int(r["Address"], 16) - base)
        if where is None:
            unmapped += n
            continue
        inst[where] += n
        samples[where] += int(r["# Samples"] or 0)
    total = sum(inst.values()) + unmapped
    per = f", {total / keys:.2f} per key" if keys else ""
    print(f"warp instructions {total}{per}; not mapped to a line: {unmapped}")
    texts = {}
    for (path, line), n in inst.most_common(top):
        if path not in texts:
            try:
                with open(path) as f:
                    texts[path] = f.read().splitlines()
            except OSError:
                texts[path] = []
        text = texts[path][line - 1].strip()[:70] if line <= len(texts[path]) else ""
        share = f"{n / keys:6.2f}/key " if keys else ""
        print(f"{share}{100 * n / total:5.1f}%  samples {samples[(path, line)]:6d}  "
              f"{os.path.basename(path)}:{line}  {text}")


if __name__ == "__main__":
    main()
