"""``queue-aware+len``: the queue-aware model on an output length corrected online per prompt bucket.

A gateway that only knows the fleet-wide mean output length tells pdroute the same length for
every request; long prompts, which ask for far fewer tokens, are then priced as if they would
decode for long (docs/simulation.md, "Effect of output-length misprediction"). This policy
learns, from the requests that finished, how the observed output lengths relate to the told
ones in each power-of-two prompt bucket (``pdroute_core.output_learning.OutputLenLearner``),
and decides with ``QueueAwareModel`` on the corrected length.

The simulator tells the policy each request's id when it decides (``decide_for``) and, when the
request finishes, its observed output tokens (``observe``), as a gateway posting ``/feedback``
would (``solver.sim.calibrating.LearningPolicy``). The answer's predictions (TTFT, e2e) are the
model's on the corrected length, so a run's prediction error shows the learning converge. Every
run starts from a fresh learner (``make_policy`` builds one per call; a sweep calls ``fresh``).
"""

from __future__ import annotations

from pdroute_core.output_learning import OutputLearningConfig, OutputLenLearner
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.sim.inputs import route_inputs
from solver.sim.policies import PolicyAnswer, RouteView

NAME = "queue-aware+len"


class OutputLearningPolicy:
    """``queue-aware`` on the learner's corrected output length (module docstring)."""

    def __init__(
        self,
        model: QueueAwareModel,
        config: OutputLearningConfig | None = None,
        name: str = NAME,
    ) -> None:
        self.model = model
        self.learner = OutputLenLearner(config)
        self._name = name
        self._pending: dict[int, tuple[int, int]] = {}  # rid -> (prompt_len, told output_len)

    @property
    def name(self) -> str:
        return self._name

    def fresh(self) -> OutputLearningPolicy:
        """The same policy with nothing learnt (a sweep starts each load from here)."""
        return OutputLearningPolicy(self.model, self.learner.config, self._name)

    def corrected_view(self, view: RouteView) -> RouteView:
        """``view`` with its output-length prediction replaced by the learner's correction."""
        corrected = self.learner.corrected(view.prompt_len, view.predicted_output_len)
        if corrected == view.predicted_output_len:
            return view
        return view._replace(predicted_output_len=corrected)

    def decide(self, view: RouteView) -> PolicyAnswer:
        b = self.model.decide(route_inputs(self.corrected_view(view)))
        return PolicyAnswer(b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms, not b.meets_slo, b.admission)

    def decide_for(self, rid: int, view: RouteView) -> PolicyAnswer:
        self._pending[rid] = (view.prompt_len, view.predicted_output_len)
        return self.decide(view)

    def observe(
        self, rid: int, ttft_ms: float, tpot_ms: float | None, e2e_ms: float, output_tokens: int
    ) -> None:
        entry = self._pending.pop(rid, None)
        if entry is not None:
            self.learner.observe(entry[0], entry[1], output_tokens)
