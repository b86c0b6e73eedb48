"""The rewrite cache `make test` writes before its pytest processes start
(tests/support/rewrite_cache.py): it covers what pytest rewrites in this project, and writes what
pytest reads back."""

from __future__ import annotations

import tomllib
from pathlib import Path

from _pytest.assertion import rewrite

from tests.support import rewrite_cache

ROOT = Path(__file__).resolve().parents[2]


def test_it_covers_the_modules_pytest_rewrites_here() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    # What test_files() assumes: pytest's default test file names, and no assertion-pass hook
    # (the cache is written without a config, as pytest writes it with the hook off).
    assert "python_files" not in options
    assert not options.get("enable_assertion_pass_hook", False)
    assert 'pytest_plugins = ["tests.support.timing"]' in (ROOT / "tests/conftest.py").read_text()
    names = {str(p.relative_to(ROOT)) for p in rewrite_cache.test_files()}
    assert {"tests/conftest.py", "tests/support/timing.py", __file__[len(str(ROOT)) + 1 :]} <= names
    assert not any("__pycache__" in name for name in names)


def test_what_it_writes_pytest_reads_and_an_edit_is_rewritten(tmp_path: Path) -> None:
    source = tmp_path / "test_sample.py"
    source.write_text("def test_sum() -> None:\n    assert 1 + 1 == 2\n")
    pyc = tmp_path / "__pycache__" / f"test_sample{rewrite.PYC_TAIL}"
    assert rewrite_cache._rewrite([source]) == (1, 0)
    assert rewrite._read_pyc(source, pyc) is not None
    assert rewrite_cache._rewrite([source]) == (0, 0)  # up to date: left alone
    source.write_text("def test_sum() -> None:\n    assert 2 + 2 == 4\n")
    assert rewrite._read_pyc(source, pyc) is None  # pytest would not use the stale one
    assert rewrite_cache._rewrite([source]) == (1, 0)
