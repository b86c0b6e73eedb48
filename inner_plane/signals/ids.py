"""Signal ids: derived from (delegate, source, dedup key) for deduplicated signals, random for
the rest, both as standard UUIDs made faster than the ``uuid`` module's (they run per signal)."""

from __future__ import annotations

import hashlib
import os
import uuid

# Fixed namespace: ids derived from (delegate, source, dedup_key) are the same on every machine.
SIGNAL_ID_NAMESPACE = uuid.UUID("6f1c5d1e-3b0a-4e0e-9a55-2d7f3c1b9e41")


_NAMESPACE_BYTES = SIGNAL_ID_NAMESPACE.bytes
# A UUID's version and variant bits cleared (then set for uuid5 or uuid4), on the 128-bit integer.
_VERSION_BITS_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID5_SET = (5 << 76) | (0x8000 << 48)


_new = uuid.UUID.__new__
_set = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


def _uuid(number: int) -> uuid.UUID:
    """``uuid.UUID(int=number)`` for a number known to be 128 bits, set as its constructor sets
    it, without the constructor's argument checks (a third of its time)."""
    made = _new(uuid.UUID)
    _set(made, "int", number)
    _set(made, "is_safe", _UNKNOWN)
    return made


def derive_signal_id(delegate_id: str, source: str, dedup_key: str) -> uuid.UUID:
    """Stable id for a deduplicated signal: a re-sent callback gets the same id everywhere.

    Exactly ``uuid.uuid5(SIGNAL_ID_NAMESPACE, "delegate/source/dedup_key")``, in half the time
    (it runs for every signal with a dedup key)."""
    digest = hashlib.sha1(_NAMESPACE_BYTES + f"{delegate_id}/{source}/{dedup_key}".encode())
    number = int.from_bytes(digest.digest()[:16])
    return _uuid((number & _VERSION_BITS_CLEAR) | _UUID5_SET)


# uuid4's version and variant bits, for random ids made many at a time.
_UUID4_SET = (4 << 76) | (0x8000 << 48)


def random_signal_ids(count: int) -> list[uuid.UUID]:
    """``count`` random (version 4) ids, as ``uuid.uuid4()`` makes them, from one read of the
    OS's random source: a read per id releases and retakes the GIL each time, a context switch
    apiece in a busy server."""
    pool = os.urandom(16 * count)
    from_bytes = int.from_bytes
    return [
        _uuid((from_bytes(pool[start : start + 16]) & _VERSION_BITS_CLEAR) | _UUID4_SET)
        for start in range(0, 16 * count, 16)
    ]
