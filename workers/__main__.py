"""``python -m workers ARGS``: ``celery -A workers ARGS`` (what `inner-plane worker`, `beat` and
`flower` run), with Celery's command line loaded under the held collector like the app itself
(``inner_plane.startup``)."""

from __future__ import annotations

import sys

from inner_plane.startup import collector_held


def main() -> None:
    with collector_held():
        from celery.__main__ import main as celery_main
    sys.argv = ["celery", "-A", "workers", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
