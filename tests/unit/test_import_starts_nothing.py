"""Importing a module starts nothing: every module of the library, the Celery app and the beat
wiring import in a fresh interpreter with no store URLs set, and no embedded server starts, no
child process appears and no publish hook is needed for wakes (publishing calls the attention
broker directly)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import importlib, json, os, pkgutil, sys
import inner_plane
names = ["workers", "workers.app", "workers.tasks", "beat_schedule"]
for info in pkgutil.walk_packages(inner_plane.__path__, "inner_plane."):
    if not info.name.endswith("__main__"):
        names.append(info.name)
for name in names:
    importlib.import_module(name)
from inner_plane.services.embedded import started_services
import workers
def parent(pid):
    try:  # a process of the machine's may end between the listing and the read
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[1]
    except (FileNotFoundError, ProcessLookupError):
        return None
children = [p for p in os.listdir("/proc") if p.isdigit() and parent(p) == str(os.getpid())]
print(json.dumps({
    "imported": len(names),
    "services": started_services() is not None,
    "celery_configured": workers.app.configured,
    "children": children,
}))
"""


def test_importing_every_module_starts_no_store_and_no_process(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    env["INNER_PLANE_DATA_DIR"] = str(tmp_path)  # where embedded servers would go
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["imported"] > 50
    assert report["services"] is False
    assert report["celery_configured"] is False
    assert report["children"] == []
    assert list(tmp_path.iterdir()) == []  # no data directory was created either
