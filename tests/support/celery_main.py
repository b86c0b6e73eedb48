"""`python -m tests.support.celery_main ARGS`: Celery's own `celery ARGS` (the same umbrella
command, app, worker and beat), without the subcommands other packages add to it.

Celery loads every ``celery.commands`` entry point when its command line is imported, and
Flower's (`celery flower`) imports Flower's whole web application: about 0.5 s of CPU in every
`celery worker` and `celery beat` a test starts, about 120 of them in `make test`, for a
subcommand none of them runs. The plane's own processes (`inner-plane up`) start Celery as
deployed (`python -m workers`); this is for the workers and beats the tests start themselves.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

from inner_plane.startup import collector_held

_entry_points = importlib.metadata.entry_points


def _without_celery_commands(**params: Any) -> Any:
    if params.get("group") == "celery.commands":
        return importlib.metadata.EntryPoints(())
    return _entry_points(**params)


def main() -> None:
    # Before Celery's command line is imported: it reads the entry points at import.
    importlib.metadata.entry_points = _without_celery_commands
    with collector_held():  # as `python -m workers` loads it
        from celery.__main__ import main as celery_main

    sys.argv[0] = "celery"
    celery_main()


if __name__ == "__main__":
    main()
