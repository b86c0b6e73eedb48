"""The plane's Prometheus metrics.

Counters and histograms are kept in one Redis hash that every process adds to (the signals and
activation workers, beat's tick, the API): a :class:`Recorder` observes the `[inner-context]`
records a process writes and flushes its increments once a second. Any API process reads the
same hash at scrape time, so the figures are right however many API processes serve /metrics,
and they survive restarts. Gauges (pending, claimed, dead, leases, lanes, queue depths, beat)
are read from the journal and Redis at scrape time.

Cardinality is bounded: signals are counted by kind namespace (the kind's first segment) and by
source. A namespace counts as itself only if the plane knows it (the built-in kinds', the kinds
file's, and ``external`` for processors); any other (a kind a processor invented, a rejected
submission's) counts as ``other``. A source counts as itself (``external.ci`` too) while fewer
than ``MAX_SOURCES`` sources exist (later ones count as ``other``; one that is not a valid
identifier, as ``invalid``); per-delegate series exist only for the top ``TOP_DELEGATES`` lanes.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inner_plane import logs, redis_keys
from inner_plane.signals.kinds import BUILTIN_KINDS, KindRegistry
from inner_plane.signals.model import is_identifier

if TYPE_CHECKING:
    import redis

    from inner_plane.journal.operator.overview import Counts, Lane
    from inner_plane.journal.plain import Rows

MAX_SOURCES = 50
TOP_DELEGATES = 10
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_SIGNAL_EVENTS = {"published", "deduplicated", "rejected", "quarantined"}
_ACTIVATION_EVENTS = {"started", "completed", "failed", "interrupted"}
# Namespaces every plane knows: the built-in kinds' and the processors' (external.<name>.<event>).
BUILTIN_NAMESPACES = frozenset(
    {policy.kind.split(".", 1)[0] for policy in BUILTIN_KINDS} | {"external"}
)


def namespaces_of(registry: KindRegistry) -> frozenset[str]:
    """The namespaces counted as themselves: the built-in ones and the registry's kinds'."""
    return BUILTIN_NAMESPACES | {policy.kind.split(".", 1)[0] for policy in registry.kinds()}


def _namespace(kind: Any, known: frozenset[str]) -> str:
    namespace = kind.split(".", 1)[0] if isinstance(kind, str) else ""
    return namespace if namespace in known else "other"


def _source_label(value: str) -> str:
    # Sources are identifiers (letters, digits, '._:-'); anything else was refused as input.
    return value if is_identifier(value) else "invalid"


def _signal_key(event: str, kind: Any, source: Any, known: frozenset[str]) -> str:
    """The counter a signal record adds to: by event, kind namespace and source."""
    return f"signals_{event}|namespace={_namespace(kind, known)}|source={source or ''}"


# Mail and SMS records and the counter each adds to (labels from closed sets only).
_MAIL_OUTCOMES = frozenset({"turn", "ambient", "dropped", "refused", "duplicate"})
_SMS_OUTCOMES = {"turn": "accepted", "unknown": "unknown", "duplicate": "duplicate"}
_ANSWER_OUTCOMES = frozenset({"sent", "failed", "none"})


def _channel_key(event: str, fields: dict[str, Any]) -> str | None:
    outcome = fields.get("outcome")
    if event == "mail_received":
        label = outcome if outcome in _MAIL_OUTCOMES else "other"
        return f"channel_messages|channel=email|outcome={label}"
    if event == "sms_received":
        return f"sms_webhook|outcome={_SMS_OUTCOMES.get(str(outcome), 'other')}"
    if event == "sms_refused":
        return "sms_webhook|outcome=refused"
    if event == "channel_answer":
        channel = fields.get("channel") if fields.get("channel") in ("email", "sms") else "other"
        label = outcome if outcome in _ANSWER_OUTCOMES else "other"
        return f"channel_answers|channel={channel}|outcome={label}"
    return None


def _bucket(seconds: float) -> str:
    for bound in BUCKETS:
        if seconds <= bound:
            return repr(bound)
    return "+Inf"


class Recorder:
    """Counts the records of this process into Redis (buffered, flushed every ``flush_s``)."""

    def __init__(
        self,
        redis_url: str,
        flush_s: float = 1.0,
        namespaces: frozenset[str] = BUILTIN_NAMESPACES,
    ) -> None:
        self.redis_url = redis_url
        self.flush_s = flush_s
        self.namespaces = namespaces
        self._pending: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        self._pid = 0
        self._sources: dict[str, str] = {}
        self._client: redis.Redis | None = None

    # The observer: called for every record, on the caller's thread; only touches memory.
    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        channel_key = _channel_key(event, fields)
        if channel_key is not None:
            self._add(channel_key, 1)
        elif event in _SIGNAL_EVENTS:
            key = _signal_key(event, fields.get("kind"), fields.get("source"), self.namespaces)
            self._add(key, 1)
        elif event in _ACTIVATION_EVENTS and fields.get("source") == "lane":
            self._add(f"activations|outcome={event}", 1)
            if event == "completed" and fields.get("duration_ms") is not None:
                self._observe("activation_duration", float(fields["duration_ms"]) / 1000)
            if event == "started" and fields.get("waited_ms") is not None:
                self._observe("wake_latency", float(fields["waited_ms"]) / 1000)

    def observe_many(self, entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Every record of a batch (``logs.emit_many``): the signal counters of a whole batch
        added at once, each distinct series' key made once."""
        counts: dict[tuple[str, Any, Any], int] = {}
        others = []
        try:
            for event, fields in entries:
                if event in _SIGNAL_EVENTS:
                    series = (event, fields.get("kind"), fields.get("source"))
                    counts[series] = counts.get(series, 0) + 1
                else:
                    others.append((event, fields))
        except TypeError:  # a kind or source that cannot be a dict key: one record at a time
            for event, fields in entries:
                self(event, fields)
            return
        if counts:
            self._add_many(
                {_signal_key(*series, self.namespaces): n for series, n in counts.items()}
            )
        for event, fields in others:
            self(event, fields)

    def _observe(self, name: str, seconds: float) -> None:
        self._add(f"{name}_bucket|le={_bucket(seconds)}", 1)
        self._add(f"{name}_sum", seconds)
        self._add(f"{name}_count", 1)

    def _add(self, key: str, amount: float) -> None:
        self._add_many({key: amount})

    def _add_many(self, amounts: dict[str, float]) -> None:
        with self._lock:
            for key, amount in amounts.items():
                self._pending[key] += amount
            if self._pid != os.getpid():  # first record in this process (or after a fork)
                self._pid = os.getpid()
                self._client = None
                self._sources = {}
                threading.Thread(target=self._loop, daemon=True, name="metrics").start()
                atexit.register(self.flush)

    def _loop(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            time.sleep(self.flush_s)
            self.flush()

    def _source(self, client: redis.Redis, source: str) -> str:
        """The label a source is counted under: itself while fewer than MAX_SOURCES exist."""
        known = self._sources.get(source)
        if known is None:
            key = redis_keys.metric_sources()
            if client.sismember(key, source) or (
                client.scard(key) < MAX_SOURCES and client.sadd(key, source) >= 0
            ):
                known = source
            else:
                known = "other"
            self._sources[source] = known
        return known

    def flush(self) -> None:
        import redis  # here: a process that records nothing (a CLI read) never loads it

        with self._lock:
            pending, self._pending = self._pending, defaultdict(float)
        if not pending:
            return
        try:
            with self._lock:  # one client: flush runs on the loop thread and at exit
                if self._client is None:
                    self._client = redis.Redis.from_url(self.redis_url, socket_timeout=2)
                client = self._client
            pipe = client.pipeline(transaction=False)
            for key, amount in pending.items():
                if "|source=" in key:
                    head, source = key.rsplit("|source=", 1)
                    key = f"{head}|source={self._source(client, _source_label(source))}"
                pipe.hincrbyfloat(redis_keys.metric_counters(), key, amount)
            pipe.execute()
        except redis.RedisError:
            # Redis down: keep the increments for the next flush rather than lose them.
            with self._lock:
                for key, amount in pending.items():
                    self._pending[key] += amount


_recorder: Recorder | None = None


def install(redis_url: str | None, registry: KindRegistry | None = None) -> None:
    """Count this process's records (once per process; nothing without a Redis URL)."""
    global _recorder
    if redis_url is None or _recorder is not None:
        return
    namespaces = BUILTIN_NAMESPACES if registry is None else namespaces_of(registry)
    _recorder = Recorder(redis_url, namespaces=namespaces)
    logs.observe(_recorder)


def flush() -> None:
    if _recorder is not None:
        _recorder.flush()


# --- Scrape side -------------------------------------------------------------------------------

_HELP = {
    "signals_published": "Signals journaled, by kind namespace and source",
    "signals_deduplicated": "Publications answered by an existing signal (same dedup key)",
    "signals_rejected": "Publications refused as bad input",
    "signals_quarantined": "Stored signals quarantined (dead) because they could not be processed",
    "activations": "Activations by outcome (started, completed, failed, interrupted)",
    "channel_messages": "Mails read, by what they became (turn, ambient, dropped, refused, "
    "duplicate)",
    "sms_webhook": "SMS webhook requests: accepted, refused (signature or form), unknown "
    "sender, duplicate (replayed MessageSid)",
    "channel_answers": "Answers to mail and SMS turns, by channel and outcome",
}
_LABELS = {
    "activations": ["outcome"],
    "channel_messages": ["channel", "outcome"],
    "sms_webhook": ["outcome"],
    "channel_answers": ["channel", "outcome"],
}
_HISTOGRAMS = {
    "activation_duration": "Seconds from an activation's start to its end",
    "wake_latency": "Seconds from a batch's oldest signal entering the journal to its activation",
}


def _split(key: str) -> tuple[str, dict[str, str]]:
    name, *pairs = key.split("|")
    return name, dict(pair.split("=", 1) for pair in pairs)


def families(
    redis_client: redis.Redis | None, engine: Any, depths: dict[str, int] | None
) -> Iterator[Any]:
    """Every metric family, read now (prometheus_client's ``collect`` protocol). ``depths``:
    the Celery queues' depths read from the broker (None: the broker did not answer)."""
    import redis
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    up = GaugeMetricFamily("inner_plane_store_up", "1 if the store answered", labels=["store"])
    raw: dict[str, float] = {}
    beat_age: float | None = None
    if redis_client is not None:
        try:
            raw = {
                (k.decode() if isinstance(k, bytes) else k): float(v)
                for k, v in redis_client.hgetall(redis_keys.metric_counters()).items()
            }
            from inner_plane.services.probes import beat_tick_age

            beat_age = beat_tick_age(redis_client)
            up.add_metric(["redis"], 1)
        except redis.RedisError:
            up.add_metric(["redis"], 0)
    counters: dict[str, Any] = {}
    for name, help_text in _HELP.items():
        label_names = _LABELS.get(name, ["namespace", "source"])
        counters[name] = CounterMetricFamily(f"inner_plane_{name}", help_text, labels=label_names)
    histograms: dict[str, dict[str, Any]] = {name: {} for name in _HISTOGRAMS}
    for key, value in raw.items():
        name, labels = _split(key)
        if name in counters:
            names = _LABELS.get(name, ["namespace", "source"])
            counters[name].add_metric([labels.get(k, "") for k in names], value)
        for hist in _HISTOGRAMS:
            if name == f"{hist}_bucket":
                histograms[hist][labels["le"]] = value
            elif name == f"{hist}_sum":
                histograms[hist]["sum"] = value
    yield from counters.values()
    for hist, help_text in _HISTOGRAMS.items():
        seen = histograms[hist]
        cumulative, buckets = 0.0, []
        for bound in [*map(repr, BUCKETS), "+Inf"]:
            cumulative += seen.get(bound, 0.0)
            buckets.append((bound, cumulative))
        family = HistogramMetricFamily(f"inner_plane_{hist}_seconds", help_text)
        family.add_metric([], buckets, sum_value=seen.get("sum", 0.0))
        yield family

    beat = GaugeMetricFamily(
        "inner_plane_beat_last_tick_age_seconds", "Seconds since beat's last scheduler loop"
    )
    if beat_age is not None:
        beat.add_metric([], beat_age)
    yield beat

    depth = GaugeMetricFamily(
        "inner_plane_queue_depth", "Messages waiting in a Celery queue", labels=["queue"]
    )
    for queue, count in (depths or {}).items():
        depth.add_metric([queue], count)
    yield depth

    yield from _journal_families(engine, up)
    yield up


@dataclass(frozen=True)
class JournalReads:
    """What a scrape reads of the journal."""

    counts: Counts
    lanes: list[Lane]
    delegates_with_backlog: int
    wake_budget_used: dict[str, int]
    tokens_today: list[dict[str, Any]]
    mailboxes: list[dict[str, Any]]
    answers_pending: dict[str, int]


def journal_reads(rows: Rows) -> JournalReads:
    """A scrape's reads of the journal, in one round trip (each its own statement, with its own
    prepared statement)."""
    from inner_plane.journal.channels import overview as channels
    from inner_plane.journal.operator import overview
    from inner_plane.journal.plain import Batch

    batch = Batch(rows)
    counts = batch.add(overview.COUNTS)
    lanes = batch.add(overview.lanes_read(TOP_DELEGATES))
    backlog = batch.add(overview.DELEGATES_WITH_BACKLOG)
    budget = batch.add(overview.wake_budget_read(TOP_DELEGATES))
    tokens = batch.add(overview.tokens_today_read(TOP_DELEGATES))
    boxes = batch.add(channels.mailboxes_read())
    pending = batch.add(channels.ANSWERS_PENDING)
    batch.run()
    return JournalReads(
        counts.value,
        lanes.value,
        backlog.value,
        budget.value,
        tokens.value,
        boxes.value,
        pending.value,
    )


def _journal_families(engine: Any, up: Any) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    from inner_plane.journal.database import engine_rows, reading

    try:
        with reading(engine) as connection:
            read = journal_reads(engine_rows(connection))
    except Exception:
        up.add_metric(["postgresql"], 0)
        return
    counts, lanes, backlog = read.counts, read.lanes, read.delegates_with_backlog
    budget, tokens = read.wake_budget_used, read.tokens_today
    boxes, pending = read.mailboxes, read.answers_pending
    up.add_metric(["postgresql"], 1)
    signals = GaugeMetricFamily("inner_plane_signals", "Signals by state, now", labels=["state"])
    for state in ("pending", "due", "claimed", "dead"):
        signals.add_metric([state], getattr(counts, state))
    yield signals
    oldest = GaugeMetricFamily(
        "inner_plane_oldest_pending_seconds", "Age of the oldest pending non-ambient signal"
    )
    oldest.add_metric([], counts.oldest_pending_s or 0.0)
    yield oldest
    turns = GaugeMetricFamily("inner_plane_user_turns_queued", "User turns waiting")
    turns.add_metric([], counts.queued_turns)
    yield turns
    running = GaugeMetricFamily("inner_plane_activations_running", "Activations running now")
    running.add_metric([], counts.running_activations)
    yield running
    leases = GaugeMetricFamily("inner_plane_leases", "Lane leases by state", labels=["state"])
    leases.add_metric(["held"], counts.leases_held)
    leases.add_metric(["expired"], counts.leases_expired)
    yield leases
    with_backlog = GaugeMetricFamily(
        "inner_plane_lanes_with_due_work", "Delegates with due signals"
    )
    with_backlog.add_metric([], backlog)
    yield with_backlog
    due = GaugeMetricFamily(
        "inner_plane_lane_due_signals",
        f"Due signals of the top {TOP_DELEGATES} lanes by backlog",
        labels=["delegate"],
    )
    age = GaugeMetricFamily(
        "inner_plane_lane_oldest_due_seconds",
        f"Age of the oldest due signal, top {TOP_DELEGATES} lanes",
        labels=["delegate"],
    )
    idle = GaugeMetricFamily(
        "inner_plane_lane_idle_with_due_work",
        "1 if the lane has due waking signals (wake, interrupt: work that should have started "
        "an activation) and no activation holds its lease; next-turn signals alone leave it 0",
        labels=["delegate"],
    )
    waking_age = GaugeMetricFamily(
        "inner_plane_lane_oldest_waking_seconds",
        f"Age of the oldest due waking signal (wake, interrupt), top {TOP_DELEGATES} lanes",
        labels=["delegate"],
    )
    for lane in lanes:
        due.add_metric([lane.delegate_id], lane.due)
        age.add_metric([lane.delegate_id], lane.oldest_due_s)
        idle.add_metric([lane.delegate_id], 1 if lane.idle_with_waking_work else 0)
        waking_age.add_metric([lane.delegate_id], lane.oldest_waking_s or 0.0)
    yield due
    yield age
    yield idle
    yield waking_age
    used = GaugeMetricFamily(
        "inner_plane_wake_budget_used",
        f"Background activations in the last hour, top {TOP_DELEGATES} delegates",
        labels=["delegate"],
    )
    for delegate, count in budget.items():
        used.add_metric([delegate], count)
    yield used
    spent = GaugeMetricFamily(
        "inner_plane_tokens_today",
        f"Model tokens (input + output) used today (UTC), top {TOP_DELEGATES} delegates",
        labels=["delegate"],
    )
    cost = GaugeMetricFamily(
        "inner_plane_token_cost_usd_today",
        f"Estimated model cost today (UTC) from the price table, top {TOP_DELEGATES} delegates",
        labels=["delegate"],
    )
    for entry in tokens:
        spent.add_metric([entry["delegate_id"]], entry["tokens"])
        cost.add_metric([entry["delegate_id"]], entry["cost_usd"])
    yield spent
    yield cost
    yield from _channel_families(boxes, pending)


def _channel_families(boxes: list[dict[str, Any]], pending: dict[str, int]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    age = GaugeMetricFamily(
        "inner_plane_mailbox_last_poll_age_seconds",
        "Seconds since the mailbox was last read (absent: never)",
        labels=["delegate"],
    )
    idle = GaugeMetricFamily(
        "inner_plane_mailbox_idle",
        "1 while a watcher waits on the mailbox with IDLE",
        labels=["delegate"],
    )
    failing = GaugeMetricFamily(
        "inner_plane_mailbox_failing", "1 if the mailbox's last poll failed", labels=["delegate"]
    )
    backlog = GaugeMetricFamily(
        "inner_plane_mailbox_backlog", "Unseen mails left for the next poll", labels=["delegate"]
    )
    for box in boxes:
        delegate = [str(box["delegate_id"])]
        if box["last_poll_age_s"] is not None:
            age.add_metric(delegate, float(box["last_poll_age_s"]))
        idle.add_metric(delegate, 1 if box["idle"] else 0)
        failing.add_metric(delegate, 1 if box["last_error"] else 0)
        backlog.add_metric(delegate, int(box["backlog"]))
    yield age
    yield idle
    yield failing
    yield backlog
    waiting = GaugeMetricFamily(
        "inner_plane_channel_answers_pending",
        "Answers to mail and SMS turns not sent yet (the outbound queue)",
        labels=["channel"],
    )
    for channel in ("email", "sms"):
        waiting.add_metric([channel], pending.get(channel, 0))
    yield waiting
