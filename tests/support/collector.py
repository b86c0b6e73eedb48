"""The garbage collector held off while a pytest process loads the library and the test modules,
as the plane's own processes hold it while they load (``inner_plane/startup.py``): with it on,
each pytest process of `make test` spent about 5 s of CPU collecting and importing, against 3 s
without. The root conftest imports this module before anything else (pytest's own plugins are
loaded by then); the collector comes back, with what loading left frozen, once collection ends
(on an xdist controller, which collects nothing, at the same point: ``give_back``)."""

from __future__ import annotations

from contextlib import ExitStack

from inner_plane.startup import collector_held

_held = ExitStack()
_held.enter_context(collector_held())


def give_back() -> None:
    """The collector on again, with what loading left frozen (the root conftest calls it once
    collection ends; later calls do nothing)."""
    _held.close()
