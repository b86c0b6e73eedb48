"""The import contracts of `make lint` (`lint-imports`, configured in pyproject.toml) hold on the
tree, and each fails when a forbidden import is added to a temporary copy of the tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("inner_plane", "workers", "beat_schedule")


def lint_imports(tree: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)  # the copy's packages win over the editable install
    only = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *only],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_tree(target: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    completed = lint_imports(copy_tree(tmp_path))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "0 broken" in completed.stdout


# (module that gets the import, the import, the id of the contract that must break)
FORBIDDEN = [
    ("inner_plane/signals/model.py", "import inner_plane.journal.signals.store", "pure"),
    ("inner_plane/config.py", "import inner_plane.runtime", "pure"),
    ("inner_plane/publish.py", "import celery", "celery"),
    ("inner_plane/lane/sweeper.py", "from kombu import Queue", "celery"),
    ("inner_plane/http/schemas.py", "import inner_plane.mcp_adapter.tools", "faces"),
    ("inner_plane/mcp_adapter/tools.py", "import inner_plane.http.schemas", "faces"),
    ("inner_plane/journal/signals/store.py", "import inner_plane.publish", "journal"),
    ("inner_plane/cli/common.py", "import inner_plane.composer.compose", "wiring"),
    ("inner_plane/lane/sweeper.py", "import inner_plane.agent.dry_run", "wiring"),
    ("inner_plane/timers/tick.py", "import inner_plane.lane.sweeper", "layers"),
    ("inner_plane/journal/signals/store.py", "import inner_plane.runtime", "layers"),
]


@pytest.mark.parametrize(("module", "statement", "contract"), FORBIDDEN)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    tree = copy_tree(tmp_path)
    path = tree / module
    source = path.read_text()
    # After the module docstring and `from __future__`, where an import would really go.
    marker = "from __future__ import annotations\n"
    assert marker in source, module
    path.write_text(source.replace(marker, f"{marker}\n{statement}  # forbidden\n", 1))
    completed = lint_imports(tree, contract)
    assert completed.returncode != 0, completed.stdout
    assert "1 broken" in completed.stdout, completed.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    imported = statement.split()[1]
    assert f"{importer} -> {imported}" in completed.stdout, completed.stdout
