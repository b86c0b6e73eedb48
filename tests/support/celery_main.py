"""`python -m tests.support.celery_main ARGS`: Celery's own `celery ARGS` (the same umbrella
command, app, worker and beat), without the subcommands other packages add to it.

Celery loads every ``celery.commands`` entry point when its command line is imported, and
Flower's (`celery flower`) imports Flower's whole web application: about 0.5 s of CPU in every
`celery worker` and `celery beat` a test starts, about 200 of them in `make test`, for a
subcommand none of them runs. ``workers.command_line`` loads the command line as `python -m
workers` does, with no other package's command at all (and the ``amqp`` shell's libraries left
until it runs). The plane's own processes (`inner-plane up`) start Celery as deployed
(`python -m workers`); this is for the workers and beats the tests start themselves.
"""

from __future__ import annotations

import sys

from workers.command_line import load_celery_main


def main() -> None:
    sys.argv[0] = "celery"
    load_celery_main(sys.argv[1:], extra_commands=False)()


if __name__ == "__main__":
    main()
