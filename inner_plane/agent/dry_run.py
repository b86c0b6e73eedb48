"""The agent a deployment runs when no model is configured: it calls nothing, records the exact
context it would have sent, and dismisses every rendered signal saying why."""

from __future__ import annotations

from inner_plane.activation import AgentResult, Disposition, Settlement, WorkingContext
from inner_plane.agent.port import StepGuard

REASON = "no model configured"


class DryRunAgent:
    name = "dry-run"

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        guard.safe_point()
        settlements = {
            signal_id: Settlement(Disposition.DISMISSED, REASON)
            for signal_id in sorted(context.rendered_signal_ids, key=str)
        }
        return AgentResult(
            settlements=settlements,
            decision=f"dry run: {REASON}; would have sent {len(context.items)} input items",
            model_input=[dict(item) for item in context.model_input()],
            agent=self.name,
        )
