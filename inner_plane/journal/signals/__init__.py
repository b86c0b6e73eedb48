"""The signals journal: every access to the ``signals`` table (``store``), a signal's history
(``events``) and its row by id (``record``), both plain SQL for the CLI's quick reads, and the
composer's reads of retained ambient signals (``ambient``).

Kept light: ``record`` and ``events`` load without SQLAlchemy, so this package imports nothing."""
