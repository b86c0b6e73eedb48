"""deploy/systemd checked by systemd's own tool: `systemd-analyze verify` (unit syntax, the
dependencies between the units, ExecStart executable) and `systemd-analyze security` (every unit
rated OK or better). Each check is also seen failing on a planted defect. Skips without
systemd-analyze, except under CI=true."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.tools import require

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
SYSTEM_UNITS = Path("/lib/systemd/system")
HARDENED = {"SAFE", "OK"}


@pytest.fixture
def analyze() -> str:
    return require("systemd-analyze", "systemd")


def _root(tmp_path: Path, units: dict[str, str]) -> Path:
    """A file system root as the units expect it: systemd's own units, ours in
    /etc/systemd/system, and an executable where ExecStart names inner-plane."""
    root = tmp_path / "root"
    binary = root / "opt" / "inner-plane" / "venv" / "bin" / "inner-plane"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    if SYSTEM_UNITS.is_dir():
        shutil.copytree(SYSTEM_UNITS, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    ours = root / "etc" / "systemd" / "system"
    ours.mkdir(parents=True)
    for name, text in units.items():
        (ours / name).write_text(text)
    return root


def _verify(analyze: str, root: Path) -> str:
    units = sorted(str(p) for p in (root / "etc" / "systemd" / "system").iterdir())
    done = subprocess.run(
        [analyze, "verify", f"--root={root}", *units], capture_output=True, text=True, timeout=120
    )
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else " (failed)")


def _ours() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(SYSTEMD.iterdir()) if p.suffix != ".md"}


def test_systemd_analyze_verify_passes_and_catches_a_typo(analyze: str, tmp_path: Path) -> None:
    assert _verify(analyze, _root(tmp_path / "good", _ours())) == ""
    planted = _ours()
    planted["inner-plane-api.service"] = planted["inner-plane-api.service"].replace(
        "ProtectHome=yes", "ProtectHom=yes"
    )
    assert "Unknown key 'ProtectHom'" in _verify(analyze, _root(tmp_path / "bad", planted))


def _exposure(analyze: str, path: Path) -> tuple[float, str]:
    done = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1)), found.group(2)


@pytest.mark.parametrize("name", sorted(p.name for p in SYSTEMD.glob("*.service")))
def test_every_unit_is_hardened_to_ok_or_better(analyze: str, name: str) -> None:
    level, word = _exposure(analyze, SYSTEMD / name)
    assert word in HARDENED, (name, level, word)


def test_a_unit_without_its_hardening_is_exposed(analyze: str, tmp_path: Path) -> None:
    text = (SYSTEMD / "inner-plane-api.service").read_text()
    kept = [
        line
        for line in text.splitlines()
        if not re.match(r"(Protect|Private|Restrict|SystemCall|Capability|UMask|Lock)", line)
    ]
    path = tmp_path / "inner-plane-api.service"
    path.write_text("\n".join(kept) + "\n")
    _level, word = _exposure(analyze, path)
    assert word not in HARDENED
