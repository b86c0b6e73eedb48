"""``python -m workers ARGS``: ``celery -A workers ARGS`` (what `inner-plane worker`, `beat` and
`flower` run), with Celery's command line loaded under the held collector like the app itself
(``inner_plane.startup``) and without what the command does not run (``workers.command_line``:
Flower's web application only for ``flower``, the ``amqp`` shell's libraries only for it)."""

from __future__ import annotations

import sys

from workers.command_line import load_celery_main


def main() -> None:
    arguments = sys.argv[1:]
    sys.argv = ["celery", "-A", "workers", *arguments]
    load_celery_main(arguments)()


if __name__ == "__main__":
    main()
