"""One activation, once opened: compose its working context (isolating signals that cannot be
composed), run the agent under the step guard, and end it through :mod:`inner_plane.lane.finish`
(completed, pre-empted or failed); then contact the user on escalated and needs_input
dispositions, best effort."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from opentelemetry.trace import Link
from sqlalchemy.exc import DBAPIError

from inner_plane import logs, tracing
from inner_plane.activation import Activation, AgentResult, Preempted, WorkingContext
from inner_plane.activation.storable import storable_result, storable_text
from inner_plane.activation.tokens import cost_usd
from inner_plane.agent.port import BaseAgent, Composer, ReadsAhead
from inner_plane.celery_bridge import send_channel_answer
from inner_plane.config import Settings
from inner_plane.journal.database import JOURNAL_DOWN, single_statement
from inner_plane.journal.lane import claims
from inner_plane.journal.lane.leases import LeaseLost, fence
from inner_plane.lane import finish
from inner_plane.lane.guard import LaneGuard
from inner_plane.lane.opening import QueueComposerRead
from inner_plane.lane.records import Step, Transaction, activation_fields, log_quarantined
from inner_plane.lane.reply_stream import ReplyStream
from inner_plane.outbound.channels import Channel
from inner_plane.outbound.deliver import contact_on_dispositions
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Signal

# Channels whose turns are answered on the same channel (inner_plane.channels.replies).
ANSWERED_CHANNELS = ("email", "sms")


@dataclass(frozen=True)
class Activator:
    """What every activation of this lane runs with."""

    runtime: Runtime
    agent: BaseAgent
    composer: Composer
    # Where escalated and needs_input dispositions reach a delegate without a person (none:
    # nobody); a delegate's person is reached on their preferred channel.
    contact_channels: list[Channel]

    @property
    def agent_name(self) -> str:
        return getattr(self.agent, "name", type(self.agent).__name__)

    @property
    def read_ahead(self) -> QueueComposerRead | None:
        """The composer's read-ahead, for the opening to queue after its commit, if it has one."""
        composer = self.composer
        return composer.read_ahead if isinstance(composer, ReadsAhead) else None

    def run(
        self,
        step: Step,
        settings: Settings,
        transaction: Transaction,
        closing: Transaction,
        lease_lost: threading.Event,
        yield_hint: threading.Event | None,
        listening: bool = False,
    ) -> None:
        """``transaction``: a fenced transaction of the run; ``closing``: the one that ends the
        activation (it also reads the next due window). ``listening``: the lane's notice
        listener was connected when the activation opened, so ``yield_hint`` tells of every
        user turn and interrupt journaled since."""
        if not tracing.on:
            self._run(step, settings, transaction, closing, lease_lost, yield_hint, listening)
            return
        activation = step.activation
        with tracing.span(
            f"invoke_agent {self.agent_name}",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.conversation.id": activation.delegate_id,
                "inner_plane.activation.id": str(activation.id),
                "inner_plane.activation.trigger": activation.trigger.value,
                "inner_plane.activation.signals": len(activation.signals),
            },
            links=self._publish_links(activation),
        ) as current:
            step.traceparent = tracing.traceparent(current)
            self._run(step, settings, transaction, closing, lease_lost, yield_hint, listening)

    @staticmethod
    def _publish_links(activation: Activation) -> list[Link]:
        """A link to the publish span of every claimed signal that was traced (read with the
        claim), at most 128 (a span's default limit: OTEL_SPAN_LINK_COUNT_LIMIT)."""
        links = (
            tracing.link(s.traceparent, **{"messaging.message.id": str(s.id)})
            for s in activation.signals[:128]
        )
        return [link for link in links if link is not None]

    def _run(
        self,
        step: Step,
        settings: Settings,
        transaction: Transaction,
        closing: Transaction,
        lease_lost: threading.Event,
        yield_hint: threading.Event | None,
        listening: bool,
    ) -> None:
        activation = step.activation
        # Only a reply to the person's turn is streamed to them: a background activation's
        # text never is.
        reply = (
            ReplyStream(self.runtime.redis, activation.delegate_id, activation.id, step.turn_id)
            if step.turn_id is not None and self.runtime.settings.redis_url is not None
            else None
        )
        guard = LaneGuard(
            lambda: single_statement(self.runtime.engine),
            activation.delegate_id,
            activation.epoch,
            str(activation.id),
            activation.trigger,
            lease_lost,
            yield_hint,
            reply,
        )
        started = time.monotonic()
        context: WorkingContext | None = None
        # Wake latency: from the oldest signal of the batch entering the journal to this start.
        oldest = min((s.created_at for s in activation.signals), default=None)
        waited = {} if oldest is None else {"waited_ms": _ms_since(oldest)}
        logs.emit("started", **activation_fields(activation), agent=self.agent.name, **waited)
        try:
            context = self._compose_isolating(step, transaction)
            activation = step.activation
            if listening:
                # The lane's listener sets the hint for any user turn or interrupt journaled
                # since the opening read the journal: the safe point runs only if one was.
                guard.checkpoint()
            else:
                guard.safe_point()
            # What a model returned is hostile input: made storable before anything records it.
            result = storable_result(self.agent.run(context, guard))
            _price(result, settings)
        except LeaseLost:
            if reply is not None:
                reply.aborted("lease_lost")
            raise
        except Preempted as preempted:
            if reply is not None:
                reply.aborted("preempted")
            finish.interrupted(
                closing,
                step,
                preempted.reason,
                context,
                time.monotonic() - started,
                _priced(_storable_partial(preempted.partial), settings),
            )
            return
        except Exception as error:  # the agent or composer failed: bounded retry
            if reply is not None:
                reply.aborted("failed")
            if tracing.on:
                tracing.failed(tracing.current_span(), error)
            finish.failed(
                closing,
                settings,
                step,
                storable_text(f"{type(error).__name__}: {error}"),
                context,
                time.monotonic() - started,
                # What an agent did before failing (AgentRunFailed.partial), for the ThoughtFlow.
                _priced(_storable_partial(getattr(error, "partial", None)), settings),
            )
            return
        finish.completed(closing, step, context, result, time.monotonic() - started)
        self._answer_on_channel(activation)
        self._contact(activation, result)

    def _answer_on_channel(self, activation: Activation) -> None:
        """A turn that came in by mail or text is answered the same way: ask for it now (beat
        sends whatever this misses)."""
        message = activation.user_message
        if message is None or message.channel not in ANSWERED_CHANNELS:
            return
        try:
            send_channel_answer(self.runtime.settings, str(message.turn_id))
        except Exception as error:  # the broker is down: beat's sweep sends it later
            logs.emit(
                "channel_answer_deferred", delegate=activation.delegate_id, reason=str(error)[:200]
            )

    def _contact(self, activation: Activation, result: AgentResult) -> None:
        """Best effort: the settlement stands whatever happens here."""
        try:
            contact_on_dispositions(
                self.runtime, self.contact_channels, activation, result.settlements, result.reply
            )
        except LeaseLost:
            raise
        except Exception as error:
            logs.emit("notify_failed", delegate=activation.delegate_id, reason=str(error)[:200])

    def _compose_isolating(self, step: Step, transaction: Transaction) -> WorkingContext:
        """Compose; if that fails, find the claimed signals that cannot be composed even alone,
        quarantine each of them (fenced), and compose the rest. A failure no single signal
        explains is the activation's (bounded retry), as before; so is the database's own
        (:func:`_not_the_signals`), which is never looked for signal by signal."""
        activation = step.activation
        composer = self.composer
        try:
            if step.ahead is not None and isinstance(composer, ReadsAhead):
                return composer.compose(activation, step.ahead)
            return composer.compose(activation)
        except (LeaseLost, Preempted):
            raise
        except Exception as error:
            if not activation.signals or _not_the_signals(error):
                raise
        culprits: list[tuple[Signal, str]] = []
        for signal in activation.signals:
            alone = dataclasses.replace(activation, signals=(signal,), user_message=None)
            try:
                self.composer.compose(alone)
            except (LeaseLost, Preempted):
                raise
            except Exception as error:
                culprits.append((signal, f"cannot be composed: {type(error).__name__}: {error}"))
        if not culprits:
            return self.composer.compose(activation)  # raises again: the activation failed
        with transaction() as connection:
            fence(connection, activation.delegate_id, activation.epoch)
            claims.quarantine(connection, activation.id, [(s.id, r) for s, r in culprits])
        log_quarantined(
            [claims.Quarantined(s.id, logs.of_signal(s), r) for s, r in culprits], activation.id
        )
        bad = {s.id for s, _ in culprits}
        step.activation = dataclasses.replace(
            activation, signals=tuple(s for s in activation.signals if s.id not in bad)
        )
        return self.composer.compose(step.activation)


def _not_the_signals(error: Exception) -> bool:
    """A failure no signal can explain: the journal's own (``JOURNAL_DOWN``, or a connection
    the error invalidated). Composing each signal alone would fail the same way and set every
    one of them aside as dead; the activation fails instead, and its signals go back to pending
    with the attempt counted (bounded retry)."""
    if isinstance(error, JOURNAL_DOWN):
        return True
    return isinstance(error, DBAPIError) and error.connection_invalidated


def _price(result: AgentResult | None, settings: Settings) -> None:
    """The estimated cost of the activation's model calls, from the price table, on its usage
    (and so on its context.usage event and the day's sum)."""
    if result is None or not result.usage:
        return
    model = result.usage.get("model")
    cost = cost_usd(model if isinstance(model, str) else None, result.usage, settings.token_prices)
    if cost is not None:
        result.usage["cost_usd"] = cost


def _priced(result: AgentResult | None, settings: Settings) -> AgentResult | None:
    _price(result, settings)
    return result


def _storable_partial(partial: AgentResult | None) -> AgentResult | None:
    return None if partial is None else storable_result(partial)


def _ms_since(moment: datetime) -> float:
    return round(max(0.0, (datetime.now(UTC) - moment).total_seconds() * 1000), 1)
