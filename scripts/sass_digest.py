#!/usr/bin/env python3
"""Per-kernel SASS digests of a built library, to prove a refactor left the device code alone.

A change that only moves or renames code (a file split, a helper shared by two kernels) should
leave every kernel's machine code as it was. Without a GPU that is the check that can be made:
    python3 scripts/sass_digest.py build-gpu/libfold_attention.so > before.txt
    ... change, rebuild ...
    python3 scripts/sass_digest.py build-gpu/libfold_attention.so > after.txt
    python3 scripts/sass_digest.py --compare before.txt after.txt
A digest covers each function's instructions and their encodings (addresses are within the
function, so they compare too); the line table (-lineinfo) is not part of it. Internal-linkage
and anonymous-namespace names carry hashes of their file's path (`_INTERNAL_<hash>_<n>_decode_cu_
<hash>`, `_GLOBAL__N__<hash>_...`), folded to one name so that builds in two folders compare.

Needs cuobjdump: on PATH, under CUDA_HOME/bin, or from the nvidia-cuda-cuobjdump wheel
(`pip install nvidia-cuda-cuobjdump`), which this script finds in site-packages.
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig

# Internal-linkage and anonymous-namespace names carry hashes of their file's path, which differ
# between build folders: folded to one name (with the length prefix of the mangled name).
_INTERNAL = re.compile(r"\d*(_INTERNAL|_GLOBAL__N_)_[0-9a-f]{8}_\d+_\w+?_cu_[0-9a-f]{8}")
_FUNCTION = re.compile(r"^\s*Function : (\S+)")


def find_cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "cuobjdump"))
    candidates.append("/usr/local/cuda/bin/cuobjdump")
    for key in ("purelib", "platlib"):
        root = sysconfig.get_paths()[key]
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            candidates.append(os.path.join(root, "nvidia", sub, "bin", "cuobjdump"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    sys.exit("sass_digest: cuobjdump not found (pip install nvidia-cuda-cuobjdump, or CUDA_HOME)")


def digests(library):
    """{kernel name (internal hashes folded): (instruction count, sha256 of its SASS)}."""
    text = subprocess.run(
        [find_cuobjdump(), "-sass", library], check=True, capture_output=True, text=True
    ).stdout
    return digests_of_dump(text)


def digests_of_dump(text):
    """digests() of cuobjdump -sass output `text`."""
    out, name, lines = {}, None, []

    def close():
        if name is None:
            return
        key = _INTERNAL.sub(r"\1_", name)
        if key in out:
            sys.exit(f"sass_digest: two functions fold to one name: {key}")
        body = "\n".join(_INTERNAL.sub(r"\1_", ln) for ln in lines)
        count = sum(1 for ln in lines if re.match(r"/\*[0-9a-f]{4,}\*/", ln))
        out[key] = (count, hashlib.sha256(body.encode()).hexdigest()[:16])

    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            close()
            name, lines = m.group(1), []
        elif name is not None and line.lstrip().startswith("/*"):
            # Instruction lines and their encodings only: the dump's section headers between
            # functions name the source file's path.
            lines.append(line.strip())
    close()
    return out


def read(path):
    table = {}
    with open(path) as f:
        for line in f:
            name, count, digest = line.split()
            table[name] = (int(count), digest)
    return table


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", nargs="?", help="a built library (or object) with device code")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="two digest files")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = read(args.compare[0]), read(args.compare[1])
        changed = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        for k in changed:
            print(f"changed  {a[k][0]:>6} -> {b[k][0]:>6} instructions  {k}")
        for k in only_a:
            print(f"removed  {k}")
        for k in only_b:
            print(f"added    {k}")
        same = len(a.keys() & b.keys()) - len(changed)
        print(f"{same} identical, {len(changed)} changed, {len(only_a)} removed, {len(only_b)} added")
        return 1 if changed or only_a or only_b else 0
    if not args.library:
        ap.error("a library, or --compare BEFORE AFTER")
    for name, (count, digest) in sorted(digests(args.library).items()):
        print(name, count, digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
