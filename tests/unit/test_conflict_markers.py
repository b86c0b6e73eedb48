"""No merge-conflict markers anywhere in the tree, and `make lint` (so `.ci/run`'s `make test`)
runs the check that says so."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.conflict_markers import ROOT, markers, scan, tree_files

LT, EQ, GT = "<" * 7, "=" * 7, ">" * 7


def test_the_tree_has_no_conflict_markers() -> None:
    assert scan(tree_files()) == []


def test_markers_inside_a_docstring_are_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(f'"""Doc.\n{LT} HEAD\nours\n{EQ}\ntheirs\n{GT} main\n"""\nX = 1\n')
    assert scan([module], tmp_path) == ["m.py:2", "m.py:4", "m.py:6"]


def test_lookalikes_are_not_markers() -> None:
    text = f"Title\n{EQ}=\n{LT}< not one\nx = '{LT} HEAD'\n== {EQ}\n"
    assert list(markers(text)) == []


def test_make_lint_runs_the_check_and_make_test_runs_lint() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert lint is not None and "-m tests.support.conflict_markers" in lint.group(1)
    # `make test` runs lint as a prerequisite or from its recipe (a parallel sub-make).
    test = re.search(r"^test:(.*)\n((?:\t.*\n)*)", makefile, re.MULTILINE)
    assert test is not None
    assert "lint" in test.group(1).split() or "lint" in test.group(2).split()
    assert "make test" in (ROOT / ".ci" / "run").read_text()
