"""The round trips a Redis client makes, as the client itself counts them.

A round trip begins each time one of its connections sends after reading an answer (or sends
for the first time): everything it sends before it next reads is one wait, however many pieces
redis-py writes a pipeline in. On the wire that cannot be told apart from a second round trip
when the pieces are far enough apart (``bench.latency_proxy`` counts turns, which a loaded
machine splits); here it can, so a test's count does not depend on timing.
"""

from __future__ import annotations

import threading
from typing import Any

from redis.connection import AbstractConnection


class RedisRoundTrips:
    """Counts, while entered, the round trips of the redis-py connections to ``port`` (every
    redis-py client of the process: the runtime's, and kombu's for a Redis broker)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.round_trips = 0
        self._lock = threading.Lock()
        self._read_since_sent: dict[int, bool] = {}
        self._saved: tuple[Any, Any] | None = None

    def __enter__(self) -> RedisRoundTrips:
        send: Any = AbstractConnection.send_packed_command
        read: Any = AbstractConnection.read_response
        self._saved = (send, read)
        counter = self

        def counted_send(connection: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(connection, "port", None) == counter.port:
                with counter._lock:
                    if counter._read_since_sent.get(id(connection), True):
                        counter.round_trips += 1
                    counter._read_since_sent[id(connection)] = False
            return send(connection, command, *args, **kwargs)

        def counted_read(connection: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(connection, "port", None) == counter.port:
                with counter._lock:
                    counter._read_since_sent[id(connection)] = True
            return read(connection, *args, **kwargs)

        AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign,assignment]
        AbstractConnection.read_response = counted_read  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *_: object) -> None:
        assert self._saved is not None
        send, read = self._saved
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        AbstractConnection.read_response = read  # type: ignore[method-assign]
