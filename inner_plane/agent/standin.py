"""The stand-in agent `inner-plane up` runs until a real agent is configured: it settles every
signal it was shown as dismissed and says so."""

from __future__ import annotations

from inner_plane.activation import AgentResult, Disposition, Settlement, WorkingContext
from inner_plane.agent.port import StepGuard


class StandinAgent:
    name = "standin"

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        reason = "stand-in agent: no base agent configured"
        return AgentResult(
            settlements={
                signal_id: Settlement(Disposition.DISMISSED, reason)
                for signal_id in context.rendered_signal_ids
            },
            decision=reason,
        )
