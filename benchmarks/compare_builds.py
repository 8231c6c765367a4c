"""Compare two dataset outputs file by file: the check behind "a refactor changes no byte".

    python benchmarks/compare_builds.py OUT_BEFORE OUT_AFTER

Build the same config and seed with the old and the new code (for the old code, a `git worktree`
of the previous commit run with PYTHONPATH pointing at it), then compare. The task cache under
`.synrail/cache` is left out (its keys carry the code version). Prints each file that differs or
exists on one side only, and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` except the task cache, by relative path."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".synrail/cache" not in p.as_posix()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before, after = file_hashes(args.before), file_hashes(args.after)
    differ = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    only = sorted(before.keys() ^ after.keys())
    for name in differ:
        print(f"differs: {name}")
    for name in only:
        print(f"only in {'before' if name in before else 'after'}: {name}")
    print(f"{len(before.keys() & after.keys()) - len(differ)} identical, {len(differ)} differ, {len(only)} on one side")
    return 1 if differ or only else 0


if __name__ == "__main__":
    sys.exit(main())
