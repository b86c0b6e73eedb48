"""Every Redis key the plane uses, in one place (Celery's own queue keys are Celery's).

Redis is the fast path only: losing any of these keys costs at most a redundant journal lookup or
a no-op activation, never a lost or doubled signal. The one exception is the receipts ledger, kept
on a Redis broker beside the queues themselves: it is as durable as the messages it records.
"""

from __future__ import annotations

PREFIX = "inner-plane:"


def dedup(delegate_id: str, source: str, dedup_key: str) -> str:
    """SET NX marker: a publication with this dedup key was already accepted."""
    return f"{PREFIX}dedup:{delegate_id}:{source}:{dedup_key}"


def wake_debounce(delegate_id: str) -> str:
    """Present while an activate(delegate) task is already enqueued for the batching window."""
    return f"{PREFIX}wake:{delegate_id}"


def turn_wake(delegate_id: str) -> str:
    """Present while an activate(delegate) sent for a user turn has not started yet: a turn
    journaled meanwhile needs no activate of its own (that one reads the journal after it)."""
    return f"{PREFIX}turnwake:{delegate_id}"


def activation_lock(delegate_id: str) -> str:
    """redis-py Lock rejecting a second concurrent activation early (the lease decides)."""
    return f"{PREFIX}lock:activation:{delegate_id}"


def rate_limit(processor: str, window: int) -> str:
    """Requests of an external processor in one rate-limit window."""
    return f"{PREFIX}rate:{processor}:{window}"


def auth_failures(client: str, window: int) -> str:
    """Failed authentications from one client address in one throttle window."""
    return f"{PREFIX}authfail:{client}:{window}"


def auth_refused(processor: str, token_digest_prefix: str) -> str:
    """A (processor name, token) pair refused moments ago: refused again without a hash."""
    return f"{PREFIX}authrefused:{processor}:{token_digest_prefix}"


def hmac_nonce(processor: str, signature: str) -> str:
    """A signed HTTP request already seen inside the replay window."""
    return f"{PREFIX}nonce:{processor}:{signature}"


def beat_leader() -> str:
    """Lock a beat process holds while it ticks (reduces waste; dedup keeps correctness)."""
    return f"{PREFIX}beat:leader"


def processors_version() -> str:
    """Random value replaced on every processor change (add, rotate, revoke): API processes
    drop their cached processor records when it differs from what they loaded under."""
    return f"{PREFIX}processors:version"


def beat_last_tick() -> str:
    """Unix time (Redis server clock, seconds) of beat's latest scheduler loop: the liveness
    that `inner-plane health beat`, `status` and /metrics read."""
    return f"{PREFIX}beat:last_tick"


def metric_counters() -> str:
    """Hash of the plane's counters, ``metric|label=value|...`` -> count, added to by every
    process (workers, API, beat) and read by any API process at scrape time."""
    return f"{PREFIX}metrics:counters"


def metric_sources() -> str:
    """Set of the signal sources that have their own series (bounded; others count as other)."""
    return f"{PREFIX}metrics:sources"


def session(session_digest: str) -> str:
    """A sign-in session (hash: principal, csrf, created), by the SHA-256 of its id: what
    Redis holds cannot be replayed as a cookie."""
    return f"{PREFIX}session:{session_digest}"


def principal_sessions(principal: str) -> str:
    """Set of the session digests of one principal (``operator:NAME``, ``person:ID``), so that
    revoking the principal ends every one of them."""
    return f"{PREFIX}sessions:{principal}"


def conversation_deltas(delegate_id: str) -> str:
    """Pub/sub channel of a delegate's reply being written (text deltas, and ``aborted`` when
    a reply stops unfinished): ephemeral, the durable reply is the journal's."""
    return f"{PREFIX}conversation:deltas:{delegate_id}"


def turn_rate(delegate_id: str, window: int) -> str:
    """Turns a delegate's person sent in one rate-limit window (the conversation API)."""
    return f"{PREFIX}turnrate:{delegate_id}:{window}"


def receipts() -> str:
    """Hash, on a Redis broker: Celery task id -> the signal-carrying message a publisher sent
    (task name, queue, args), from just before it was sent until its signals were journaled."""
    return f"{PREFIX}receipts"


def receipts_since() -> str:
    """Sorted set beside :func:`receipts`: the same task ids, scored by when they were recorded
    (the Redis server's clock), so the sweeper finds those left unjournaled."""
    return f"{PREFIX}receipts:since"
