"""Opening an activation, in one fenced transaction: read the due window (the fence with it),
take the next user turn if one waits, decide (:mod:`inner_plane.lane.decide`, pure), and carry
the decision out: note the open batching window, defer for the wake budget, or kill exhausted
signals, claim the batch, insert the activation row with its first conversation events."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from inner_plane import logs
from inner_plane.activation import Activation, UserMessage
from inner_plane.config import Settings
from inner_plane.journal import pipeline
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import usage
from inner_plane.journal.lane import activations, claims, user_turns
from inner_plane.journal.lane.leases import LeaseLost, fence_check, is_lease_lost
from inner_plane.journal.people import people
from inner_plane.lane import decide
from inner_plane.lane.records import Step, Transaction, activation_fields, entry, log_quarantined

# The composer's read queued on the opening's connection (agent.port.ReadsAhead.read_ahead).
QueueComposerRead = Callable[[Connection, Activation], object | None]


def open_step(
    transaction: Transaction,
    settings: Settings,
    policy_of: Callable[[Connection, claims.DueWindow], decide.LanePolicy],
    *,
    delegate_id: str,
    epoch: int,
    holder: str,
    agent_name: str,
    reason: str,
    first: bool,
    window: claims.DueWindow | None = None,
    read_ahead: QueueComposerRead | None = None,
) -> Step | float | None:
    """The next step, or when to look again (None: not until something arrives).

    ``policy_of``: the delegate's attention policy for the window read (the window carries the
    version in force, read by the same statement; see :mod:`inner_plane.attention.live`).
    ``window``: read already, in the round trip that took the lease; the transaction's first
    statement then carries the fence as a check that aborts it when stale."""
    activation_id = uuid.uuid4()
    try:
        return _open(
            transaction,
            settings,
            policy_of,
            activation_id,
            delegate_id=delegate_id,
            epoch=epoch,
            holder=holder,
            agent_name=agent_name,
            reason=reason,
            first=first,
            window=window,
            read_ahead=read_ahead,
        )
    except DBAPIError as error:
        if is_lease_lost(error):
            raise LeaseLost(delegate_id, epoch, None) from None
        raise


def _wait_out(
    window: claims.DueWindow,
    policy: decide.LanePolicy,
    settings: Settings,
    first: bool,
    reason: str,
) -> decide.Decision:
    """A window about to close (a wake's activate is sent that early on purpose) is waited out
    here, the lease held, and the claim follows its close by one round trip; a longer wait is
    returned, to defer. Counted from when the window's read was answered (the database stamped
    its clock before that), so the wait ends as the window closes, never before; a signal
    journaled meanwhile joins the batch, as one journaled between the read and the claim always
    has. Each look is later than the last: the loop ends once the window has closed."""
    read_at = time.monotonic() if window.read_at is None else window.read_at
    lead_s = settings.wake_lead_ms / 1000
    while True:
        decision = decide.decide(
            window.seen_later(time.monotonic() - read_at), policy, first=first, reason=reason
        )
        if not isinstance(decision, decide.Wait) or not decide.waits_in_task(decision, lead_s):
            return decision
        time.sleep(decision.seconds)


def _open(
    transaction: Transaction,
    settings: Settings,
    policy_of: Callable[[Connection, claims.DueWindow], decide.LanePolicy],
    activation_id: uuid.UUID,
    *,
    delegate_id: str,
    epoch: int,
    holder: str,
    agent_name: str,
    reason: str,
    first: bool,
    window: claims.DueWindow | None,
    read_ahead: QueueComposerRead | None,
) -> Step | float | None:
    ahead: object | None = None
    with transaction() as connection:
        if window is None:
            # Its commit need not wait for a WAL flush: a database crash before the activation
            # ends returns the claims to pending and the turn to queued, as if never opened.
            window = claims.due_window(connection, delegate_id, opening=True)
        else:
            # The fence rides with the transaction's first statement (and its commit need not
            # wait for a flush either: the check selects SKIP_FLUSH's setting too).
            pipeline.ahead(connection, *fence_check(delegate_id, epoch, skip_flush=True))
        if window.lease_epoch != epoch:  # the fence, read FOR SHARE by the same query
            raise LeaseLost(delegate_id, epoch, window.lease_epoch)
        policy = policy_of(connection, window)
        turn = (
            user_turns.next_user_turn(
                connection,
                delegate_id,
                activation_id,
                # Read with the take: a pre-empted turn that runs again has its message already.
                message_journaled=conversation.turn_message_journaled("t.id"),
            )
            if decide.takes_user_turn(window)
            else None
        )
        decision = decide.decide(
            window,
            policy,
            first=first,
            reason=reason,
            user_turn_channel=None if turn is None else turn.channel,
        )
        if isinstance(decision, decide.Wait):
            decision = _wait_out(window, policy, settings, first, reason)
        if isinstance(decision, decide.Idle):
            return decision.countdown
        if isinstance(decision, decide.Wait):
            claims.note_due(
                connection,
                delegate_id,
                "deferred",
                f"batching window open ({decision.seconds:.3f} s"
                f"{_by_policy(policy.version, decision.rule)})",
                policy_version=policy.version,
            )
            logs.emit(
                "deferred",
                delegate=delegate_id,
                reason="batching window open",
                wait_s=round(decision.seconds, 3),
                policy_version=policy.version,
                rule=decision.rule,
            )
            return decision.seconds
        # The daily token budget and the quiet hours hold background runs (each a read, made
        # only when the policy in force sets it).
        decision = decide.held_back(
            decision,
            policy,
            window.now,
            lambda: usage.tokens_today(connection, delegate_id),
            lambda: people.time_zone_of(connection, delegate_id),
        )
        if isinstance(decision, decide.DeferForBudget):
            ids = claims.defer_signals(
                connection,
                delegate_id,
                decision.until,
                decision.reason + _by_policy(policy.version, policy.delegate_rule),
                policy_version=policy.version,
            )
            logs.emit(
                "deferred",
                delegate=delegate_id,
                reason=decision.reason,
                until=decision.until,
                signal_ids=[str(i) for i in ids],
            )
            return None
        if decision.background_waits and turn is not None:
            logs.emit("deferred", delegate=delegate_id, reason="user turn waiting", turn=turn.id)
        dead = claims.kill_exhausted(connection, delegate_id) if window.exhausted else []
        # Along with the claim (one round trip): the composer's person zone, and the
        # conversation the opening appends to, opened if none is.
        person = pipeline.ahead(connection, *people.zone_statement(delegate_id))
        pipeline.ahead(connection, *conversation.open_conversation(delegate_id))
        batch = claims.claim_batch(
            connection,
            delegate_id,
            activation_id,
            policy.batch_limit,
            kind_limits=policy.kind_limits(k.kind for k in window.kinds),
            # A user turn breaks a chain: the loop guard follows autonomous work only.
            chain_limit=settings.loop_chain_limit if turn is None else None,
            policy_version=policy.version,
        )
        claimed = batch.signals
        log_quarantined(batch.quarantined, activation_id)
        for item in batch.stopped:
            logs.emit("loop_stopped", **item.fields, reason=item.reason, activation=activation_id)
        if turn is None and not claimed:
            claims.detach_from_activation(
                connection,
                activation_id,
                [q.signal_id for q in (*batch.quarantined, *batch.stopped)],
            )
            for signal in dead:
                logs.emit("dead", **logs.of_signal(signal), reason=signal.last_error)
            return None
        activation = Activation(
            id=activation_id,
            delegate_id=delegate_id,
            trigger=decision.trigger,
            epoch=epoch,
            now=window.now,
            signals=tuple(claimed),
            user_message=None
            if turn is None
            else UserMessage(turn.text, turn.channel, turn.id, turn.in_reply_to),
            person_zone=people.zone_answer(person.rows()) if person.ran else None,
        )
        if turn is None:
            opening = conversation.ACTIVATION_STARTED
        elif turn.message_journaled or (
            turn.message_journaled is None and conversation.turn_has_message(connection, turn.id)
        ):
            opening = conversation.TURN_RESUMED  # pre-empted before: its message stands
        else:
            opening = conversation.USER_MESSAGE
        entries = [entry(activation, opening, {"reason": decision.reason})]
        if turn is not None and claimed:
            entries.append(entry(activation, conversation.CONTEXT_ATTACHED, {}))
        # The opening's last statement: its commit rides with it, and the composer's read
        # after the commit (optional: its failure is the composition's, not the opening's).
        pipeline.after(connection, "COMMIT")
        ahead = _queue_read_ahead(read_ahead, connection, activation)
        activations.insert_activation(
            connection,
            activation_id=activation_id,
            delegate_id=delegate_id,
            trigger=decision.trigger.value,
            reason=decision.reason,
            epoch=epoch,
            holder=holder,
            signal_ids=[s.id for s in claimed],
            turn_id=None if turn is None else turn.id,
            attempts=max((s.attempts for s in claimed), default=1),
            agent=agent_name,
            chain_depth=batch.chain_depth,
            entries=entries,
            policy_version=policy.version,
        )
    for signal in dead:
        logs.emit("dead", **logs.of_signal(signal), reason=signal.last_error)
    logs.emit("batch", **activation_fields(activation), reason=decision.reason)
    return Step(activation, None if turn is None else turn.id, ahead=ahead)


def _queue_read_ahead(
    read_ahead: QueueComposerRead | None, connection: Connection, activation: Activation
) -> object | None:
    """The composer's read queued after the commit, or None: a composer that cannot say what
    it reads before composing reads in a round trip of its own, as without it."""
    if read_ahead is None:
        return None
    try:
        return read_ahead(connection, activation)
    except Exception as error:  # the composer's own failure shows when it composes
        logs.emit("read_ahead_failed", delegate=activation.delegate_id, activation=activation.id,
                  reason=f"{type(error).__name__}: {error}"[:200])  # fmt: skip
        return None


def _by_policy(version: int | None, rule: str | None) -> str:
    """ "; policy v7, rule `task.*`" for a decision a stored policy made ("" for the settings)."""
    if version is None:
        return ""
    return f"; policy v{version}" + ("" if rule is None else f", rule `{rule}`")
