"""A process's start: the garbage collector held off while it loads its libraries.

Loading the plane (SQLAlchemy, psycopg, pydantic, Celery, the journal's tables) allocates
hundreds of thousands of objects that live as long as the process. With the collector on, each
step of that growth sets off collections that walk everything loaded so far: a third of the CPU
of a worker's or pytest process's start (`import workers`: about 1.3 s of CPU with it, 0.85 s
without, on the 2-core machine). What loading leaves is frozen (``gc.freeze``), so later
collections never walk it again, and a forked child (a prefork pool's) shares it untouched.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_held() -> Iterator[None]:
    """Hold the collector off for the block, then freeze what it left and give the collector
    back as it was: nested holds (a launcher around an app module that holds its own) leave it
    to the outermost."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
