"""External tools the tests run (promtool, systemd-analyze, kubectl): found on PATH, or the test
skips, except under CI=true, where `.ci/run` installs them and a missing one fails the run."""

from __future__ import annotations

import os
import shutil

import pytest


def require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} is not installed (Debian: apt-get install {package})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
