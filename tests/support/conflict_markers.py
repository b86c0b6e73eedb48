"""`make lint`'s check for merge-conflict markers anywhere in the tree (also inside strings and
docstrings, where ruff and mypy let them pass): ``python -m tests.support.conflict_markers``
prints each ``path:line`` found and exits 1, or exits 0 silently.

The files are git's tracked and untracked-but-not-ignored ones (what a commit would hold); outside
a git checkout every file under the root but the usual caches. Binary files are skipped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Written as repetitions so this file does not match itself: git's three markers, and diff3's.
MARKER = re.compile(r"^(?:<{7}(?: |$)|>{7}(?: |$)|={7}$|\|{7}(?: |$))", re.MULTILINE)
SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


def tree_files(root: Path = ROOT) -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [
            path
            for path in root.rglob("*")
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(root).parts)
        ]
    return [root / name for name in listed.decode().split("\0") if name]


def markers(text: str) -> Iterator[int]:
    """The 1-based line numbers of conflict markers in ``text``."""
    for match in MARKER.finditer(text):
        yield text.count("\n", 0, match.start()) + 1


def scan(paths: Iterable[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # deleted but still listed, or a dangling link
        if b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", "replace")
        found += [f"{path.relative_to(root)}:{line}" for line in markers(text)]
    return found


def main() -> int:
    found = scan(tree_files())
    for place in found:
        print(f"{place}: merge-conflict marker", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
