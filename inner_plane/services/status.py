"""What `inner-plane status` reports: every part of a plane checked once, each problem with what
to do about it, and an overall state (healthy, degraded, down)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from inner_plane.config import Settings
from inner_plane.services import probes

if TYPE_CHECKING:
    from inner_plane.journal.operator.overview import Counts, Lane
    from inner_plane.journal.plain import Rows

# Queues a plane needs consumed, with the worker role that consumes each.
QUEUE_ROLES = {
    "signals": "signals",
    "activation": "activation",
    "user_turns": "user_turns",
    "periodic": "periodic",
}
HEALTHY, DEGRADED, DOWN = "healthy", "degraded", "down"
NOTICE = "notice"  # worth knowing, not a fault: leaves the state healthy
EXIT_CODES = {HEALTHY: 0, DEGRADED: 1, DOWN: 2}


def masked(url: str) -> str:
    """A URL without its password."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


@dataclass
class Problem:
    severity: str  # DOWN, DEGRADED or NOTICE
    what: str
    do: str


@dataclass
class Report:
    stores: dict[str, Any] = field(default_factory=dict)
    workers: dict[str, list[str]] = field(default_factory=dict)
    queues: dict[str, int] = field(default_factory=dict)
    beat: dict[str, Any] = field(default_factory=dict)
    endpoints: dict[str, Any] = field(default_factory=dict)
    journal: dict[str, Any] = field(default_factory=dict)
    lanes: list[dict[str, Any]] = field(default_factory=list)
    tokens_today: list[dict[str, Any]] = field(default_factory=list)
    channels: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def state(self) -> str:
        severities = {p.severity for p in self.problems} - {NOTICE}
        return DOWN if DOWN in severities else DEGRADED if severities else HEALTHY

    def problem(self, severity: str, what: str, do: str) -> None:
        self.problems.append(Problem(severity, what, do))

    def public(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "stores": self.stores,
            "workers": self.workers,
            "queues": self.queues,
            "beat": self.beat,
            "endpoints": self.endpoints,
            "journal": self.journal,
            "lanes": self.lanes,
            "tokens_today": self.tokens_today,
            "channels": self.channels,
            "problems": [p.__dict__ for p in self.problems],
        }


@dataclass(frozen=True)
class Targets:
    """Where the plane's parts are, and the bounds to judge them by."""

    settings: Settings
    api_url: str | None
    flower_url: str | None
    top_lanes: int = 10
    beat_max_age_s: float = 60.0
    stuck_after_s: float = 120.0
    timeout_s: float = 2.0


@dataclass(frozen=True)
class JournalView:
    """What `status` reads of the journal (after its schema check)."""

    counts: Counts
    delegates_with_backlog: int
    lanes: list[Lane]
    tokens_today: list[dict[str, Any]]
    mailboxes: list[dict[str, Any]]
    answers_pending: dict[str, int]


def journal_view(rows: Rows, top_lanes: int) -> JournalView:
    """`status`'s reads of the journal, in one round trip (each its own statement)."""
    from inner_plane.journal.channels import overview as channels
    from inner_plane.journal.operator import overview
    from inner_plane.journal.plain import Batch

    batch = Batch(rows)
    counts = batch.add(overview.COUNTS)
    backlog = batch.add(overview.DELEGATES_WITH_BACKLOG)
    lanes = batch.add(overview.lanes_read(top_lanes))
    tokens = batch.add(overview.tokens_today_read(top_lanes))
    boxes = batch.add(channels.mailboxes_read())
    pending = batch.add(channels.ANSWERS_PENDING)
    batch.run()
    return JournalView(
        counts.value, backlog.value, lanes.value, tokens.value, boxes.value, pending.value
    )


def _database(report: Report, targets: Targets) -> bool:
    # A libpq connection, not an engine: the command starts without loading SQLAlchemy.
    from inner_plane.journal import plain

    url = targets.settings.database_url
    assert url is not None
    entry: dict[str, Any] = {"url": masked(url)}
    report.stores["database"] = entry
    try:
        with plain.connect(url, targets.timeout_s, "inner-plane status") as rows:
            entry["reachable"] = True
            current = sorted(plain.schema_versions(rows))
            expected = current if plain.at_code_head(current) else sorted(_expected_heads(url))
            entry.update(schema=current, expected_schema=expected)
            if current != expected:
                report.problem(
                    DOWN,
                    f"journal schema is {current or 'empty'}, this inner-plane needs {expected}",
                    "run `inner-plane db upgrade` (or upgrade inner-plane if the schema is newer)",
                )
                return False
            view = journal_view(rows, targets.top_lanes)
            counts, lanes = view.counts, view.lanes
            report.journal = counts.public()
            report.journal["delegates_with_backlog"] = view.delegates_with_backlog
            report.lanes = [lane.public() for lane in lanes]
            report.tokens_today = view.tokens_today
            _channels(report, targets, view.mailboxes, view.answers_pending)
    except Exception as error:
        entry["reachable"] = False
        entry["error"] = str(error).strip().splitlines()[0][:300] if str(error) else repr(error)
        report.problem(
            DOWN,
            f"the journal database is unreachable ({entry['error']})",
            "start PostgreSQL (with `inner-plane up`, it restarts on its own) and check "
            "INNER_PLANE_DATABASE_URL",
        )
        return False
    if counts.dead:
        # Old dead letters are a notice; one that died within the hour degrades the plane.
        recent = counts.newest_dead_s is not None and counts.newest_dead_s < 3600
        report.problem(
            DEGRADED if recent else NOTICE,
            f"{counts.dead} dead signal(s)" + (", newest within the hour" if recent else ""),
            "inspect with `inner-plane signals list --state dead`, then `signals retry ID` "
            "or `signals dismiss ID`",
        )
    # Stuck: due signals that should have started an activation (wake, interrupt) wait past the
    # bound with no activation holding the lease. next-turn signals wait for the next activation
    # by design, so a lane holding only those is not stuck (the same rule as the alert
    # InnerPlaneLaneStuck, through inner_plane_lane_idle_with_due_work).
    for lane in lanes:
        if lane.stuck(targets.stuck_after_s):
            report.problem(
                DEGRADED,
                f"lane {lane.delegate_id!r} has {lane.waking} due waking signal(s) waiting "
                f"{lane.oldest_waking_s or 0:.0f} s with no activation running",
                "check the activation worker (`inner-plane health worker activation`) and "
                f"`inner-plane signals list --delegate {lane.delegate_id}`",
            )
    return True


def _channels(
    report: Report, targets: Targets, boxes: list[dict[str, Any]], pending: dict[str, int]
) -> None:
    """Mail and SMS: each mailbox's poll, IDLE, error and backlog; answers waiting to go out."""
    if not boxes and not pending:
        return
    report.channels = {"mailboxes": boxes, "answers_pending": pending}
    stale_after = targets.settings.mail_poll_interval_s * 3 + 60
    for box in boxes:
        if box["last_error"]:
            report.problem(
                DEGRADED,
                f"mailbox of {box['delegate_id']!r} fails: {str(box['last_error'])[:200]}",
                f"check its settings (`inner-plane mail show {box['delegate_id']}`) and the "
                "IMAP server",
            )
        elif box["last_poll_age_s"] is None or box["last_poll_age_s"] > stale_after:
            report.problem(
                NOTICE,
                f"mailbox of {box['delegate_id']!r} was not read for a while",
                "check that beat and the periodic worker run (or `inner-plane mail watch`)",
            )


def _counters(report: Report, client: redis.Redis) -> None:
    """The SMS webhook's and the answers' counters (the /metrics hash), when there are any."""
    from inner_plane import redis_keys

    try:
        raw = client.hgetall(redis_keys.metric_counters())
    except redis.RedisError:
        return
    found: dict[str, float] = {}
    for key, value in raw.items():
        name = key.decode() if isinstance(key, bytes) else str(key)
        if name.startswith(("sms_webhook|", "channel_messages|", "channel_answers|")):
            found[name] = float(value)
    if found:
        report.channels["counters"] = dict(sorted(found.items()))


def _expected_heads(url: str) -> set[str]:
    # Alembic (slow to load) only to explain a mismatch.
    from inner_plane.journal import database

    return database.expected_heads(url)


def _redis(report: Report, targets: Targets) -> redis.Redis | None:
    url = targets.settings.redis_url
    assert url is not None
    client = probes.redis_client(url, targets.timeout_s)
    try:
        client.ping()
    except redis.RedisError as error:
        report.stores["redis"] = {"url": masked(url), "reachable": False, "error": str(error)}
        report.problem(
            DOWN,
            f"Redis is unreachable ({error})",
            "start Redis (with `inner-plane up`, it restarts on its own) and check "
            "INNER_PLANE_REDIS_URL",
        )
        return None
    report.stores["redis"] = {"url": masked(url), "reachable": True}
    return client


def _broker(
    report: Report, targets: Targets, client: redis.Redis | None
) -> tuple[bool, int | None]:
    """Whether the broker answers, and how many broadcast listeners it has (None: unknown)."""
    broker_url = targets.settings.effective_broker_url
    if broker_url == targets.settings.redis_url:
        report.stores["broker"] = {"url": masked(broker_url), "same_as_redis": True}
        if client is None:
            return False, None
        broker = client
    elif probes.is_redis_url(broker_url):
        broker = probes.redis_client(probes.redis_py_url(broker_url), targets.timeout_s)
        try:
            broker.ping()
        except redis.RedisError as error:
            report.stores["broker"] = {"url": masked(broker_url), "reachable": False}
            report.problem(
                DOWN, f"the broker is unreachable ({error})", "check INNER_PLANE_BROKER_URL"
            )
            return False, None
        report.stores["broker"] = {"url": masked(broker_url), "reachable": True}
    else:
        from inner_plane import celery_bridge

        try:
            report.queues = celery_bridge.amqp_queue_depths(
                broker_url, list(QUEUE_ROLES), targets.timeout_s
            )
        except Exception as error:
            report.stores["broker"] = {"url": masked(broker_url), "reachable": False}
            report.problem(
                DOWN, f"the broker is unreachable ({error})", "check INNER_PLANE_BROKER_URL"
            )
            return False, None
        report.stores["broker"] = {"url": masked(broker_url), "reachable": True}
        return True, None
    with contextlib.suppress(redis.RedisError):
        report.queues = probes.queue_depths(broker, list(QUEUE_ROLES))
    return True, probes.broadcast_listeners(broker)


def _workers(report: Report, targets: Targets, listeners: int | None) -> None:
    # With no worker listening for broadcasts, none can answer: no ping (no Celery import, no
    # wait of the whole timeout). With some, the ping ends once that many have answered.
    if listeners != 0:
        from inner_plane import celery_bridge

        try:
            report.workers = celery_bridge.worker_queues(
                targets.settings, timeout=targets.timeout_s, expected=listeners
            )
        except Exception as error:
            report.problem(DEGRADED, f"could not ask the workers ({error})", "check the broker")
            return
    consumed = {queue for queues in report.workers.values() for queue in queues}
    for queue, role in QUEUE_ROLES.items():
        if queue not in consumed:
            waiting = report.queues.get(queue)
            backlog = f" ({waiting} message(s) waiting)" if waiting else ""
            report.problem(
                DEGRADED,
                f"no live worker consumes queue {queue!r}{backlog}",
                f"start `inner-plane worker {role}` (`inner-plane up` restarts its own)",
            )


def _beat(report: Report, targets: Targets, client: redis.Redis) -> None:
    try:
        age = probes.beat_tick_age(client)
    except redis.RedisError:
        return
    report.beat = {"last_tick_age_s": age, "max_age_s": targets.beat_max_age_s}
    if age is None or age > targets.beat_max_age_s:
        seen = "never ticked" if age is None else f"last ticked {age:.0f} s ago"
        report.problem(
            DEGRADED,
            f"beat is silent ({seen}): no timers, sweeps or retention",
            "start exactly one `inner-plane beat`",
        )


def _endpoint(report: Report, name: str, url: str | None, path: str, expect: str) -> None:
    if url is None:
        return
    check = probes.http_check(url.rstrip("/") + path, expect=expect, timeout=3.0)
    report.endpoints[name] = {"url": url, "ok": check.ok, "detail": check.detail}
    if not check.ok:
        report.problem(
            DEGRADED,
            f"{name} does not answer at {url} ({check.detail})",
            f"start `inner-plane {'serve' if name == 'api' else 'flower'}`",
        )


def collect(targets: Targets) -> Report:
    report = Report()
    database_ok = _database(report, targets)
    client = _redis(report, targets)
    broker_ok, listeners = _broker(report, targets, client)
    if broker_ok:
        _workers(report, targets, listeners)
    if client is not None:
        _beat(report, targets, client)
        _counters(report, client)
    _endpoint(report, "api", targets.api_url, "/healthz", '"ok"' if database_ok else "")
    _endpoint(report, "flower", targets.flower_url, "/healthcheck", "OK")
    return report
