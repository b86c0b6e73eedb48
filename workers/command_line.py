"""Celery's command line (``celery.bin.celery``), loaded with only what the process will run.

Importing it imports every subcommand Celery has, and each package's ``celery.commands`` entry
point. Two of those cost every worker and beat CPU at its start for nothing it runs:

- ``celery amqp``'s shell registers itself through ``click_repl``, which imports prompt_toolkit
  and wcwidth at once. While the command line loads, ``click_repl`` is a stand-in whose
  ``register_repl`` adds the same ``repl`` command, importing the real ``click_repl`` only when
  someone runs it.
- Flower's entry point (``celery flower``) imports Flower's whole web application. Other
  packages' commands are loaded only when the command line names one of them.

Both hold only while the command line loads: the real ``click_repl`` is importable after it.
Loading the app and the command line took 0.80 s of CPU against 0.97 for `python -m workers
worker`, and 0.72 against 0.87 for the tests' launcher (no other package's command either
way), on the 2-core machine, six runs of each alternated.
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from inner_plane.startup import collector_held

_EXTRA_COMMANDS = "celery.commands"


def _register_repl_on_use(group: Any, name: str = "repl") -> None:
    """``click_repl.register_repl`` without importing prompt_toolkit until the shell runs."""
    import click

    def repl(context: click.Context) -> None:
        from click_repl import repl as run_repl

        run_repl(context)

    group.command(name=name, help="Start an interactive shell.")(click.pass_context(repl))


def _extra_command_names() -> set[str]:
    # Reads the installed packages' metadata only (no entry point is loaded).
    return {point.name for point in importlib.metadata.entry_points(group=_EXTRA_COMMANDS)}


def load_celery_main(argv: Sequence[str], extra_commands: bool = True) -> Callable[[], None]:
    """Celery's ``main`` with its command line loaded, under the held collector
    (``inner_plane.startup``). ``argv``: the arguments it will parse; other packages' commands
    are loaded only if ``extra_commands`` and one of them is named there (``flower``), since the
    command line looks a subcommand up only among those loaded. Celery's ``main`` still picks
    the pool (``maybe_patch_concurrency``) when called, as before: the app, and Celery with it,
    is loaded before this in every launcher."""
    with collector_held(), _loading(argv, extra_commands):
        import celery.bin.celery  # noqa: F401 - Celery's main imports it when called: here, held
        from celery.__main__ import main
    return main


@contextmanager
def _loading(argv: Sequence[str], extra_commands: bool) -> Iterator[None]:
    entry_points = importlib.metadata.entry_points
    load_extra = extra_commands and bool(_extra_command_names() & set(argv))

    def without_extra(**params: Any) -> Any:
        if params.get("group") == _EXTRA_COMMANDS:
            return importlib.metadata.EntryPoints(())
        return entry_points(**params)

    stand_in: types.ModuleType | None = None
    if "click_repl" not in sys.modules:
        stand_in = types.ModuleType("click_repl")
        stand_in.register_repl = _register_repl_on_use  # type: ignore[attr-defined]
        sys.modules["click_repl"] = stand_in
    if not load_extra:
        importlib.metadata.entry_points = without_extra
    try:
        yield
    finally:
        importlib.metadata.entry_points = entry_points
        if stand_in is not None and sys.modules.get("click_repl") is stand_in:
            del sys.modules["click_repl"]
