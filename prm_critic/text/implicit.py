"""An implicit PRM: step rewards from a value model trained on trajectory outcomes only.

No step is labelled by hand or by Monte-Carlo rollouts. A text critic ``V`` is trained on
:func:`outcome_examples` (every step of a trajectory labelled with the trajectory's outcome, 1 won,
0 not), so its ``success`` head estimates ``V(prefix_t) = P(won | prompt, steps[:t+1])`` under the
policy that produced the data. :class:`ImplicitPRM` turns it into per-step rewards::

    V_t = V(prompt, steps[:t])          t = 1 .. T    (the value model's success head at step t)
    V_0 = V(prompt, [""])               baseline="prompt": the prompt followed by one empty step
        = b                             baseline=b, a float in [0, 1] fixed for every prompt
    r_t = V_t - V_{t-1}                 in [-1, 1]
    sum_{t=1..T} r_t = V_T - V_0        (the rewards telescope)

:func:`prompt_value_examples` gives the value model examples of ``V_0`` itself (the prompt and one
empty step, labelled with the mean outcome of that prompt's trajectories), so that
``baseline="prompt"`` reads a trained estimate rather than a score of an input never seen in training.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from prm_critic import validate
from prm_critic.critic import CriticInfo, StepScores
from prm_critic.text.contract import check_text_steps
from prm_critic.text.critic import TextCritic
from prm_critic.text.steps import TextStep
from prm_critic.text.trl_format import StepwiseExample

__all__ = ["ImplicitPRM", "outcome_examples", "prompt_value_examples", "PROMPT_STEP", "REWARD", "VALUE_PREV"]

#: the step text that stands for "the prompt alone": ``V_0 = V(TextStep(prompt, (), PROMPT_STEP))``
PROMPT_STEP = ""
#: ``StepScores.extra`` key of the implicit step reward ``r_t`` (in [-1, 1])
REWARD = "implicit_reward"
#: ``StepScores.extra`` key of the previous prefix's value ``V_{t-1}`` (``V_0`` for a first step)
VALUE_PREV = "value_prev"


def _checked_trajectories(examples: Any) -> list[StepwiseExample]:
    return validate.check_list("examples", examples, StepwiseExample, allow_empty=True)


def _outcome(i: int, ex: StepwiseExample) -> float:
    """Example ``i``'s outcome: its last label, which must be exactly 0 or 1."""
    if not ex.completions or not ex.labels:
        raise ValueError(f"examples[{i}]: a trajectory with no steps has no outcome (completions "
                         f"{len(ex.completions)}, labels {len(ex.labels)})")
    if len(ex.labels) != len(ex.completions):
        raise ValueError(f"examples[{i}]: expected one label per step, got {len(ex.labels)} labels for "
                         f"{len(ex.completions)} steps")
    y = ex.labels[-1]
    if isinstance(y, bool) or not isinstance(y, (int, float)) or y not in (0.0, 1.0):
        raise ValueError(f"examples[{i}]: the last label is the trajectory's outcome and must be exactly 0 or 1, "
                         f"got {y!r}")
    return float(y)


def outcome_examples(examples: Sequence[StepwiseExample]) -> list[StepwiseExample]:
    """Outcome-only labels: every step of each trajectory labelled with the trajectory's outcome.

    The outcome is the example's LAST label, which must be exactly 0 or 1 (won / not won); the
    earlier labels (e.g. Monte-Carlo estimates) are discarded, and so are ``progress`` labels (they
    are step labels too; the trainer then uses its default progress target). A branch example (a
    trajectory's first steps and another step that ends the game) is a trajectory too: its steps
    get the branch's outcome. The input examples are not changed.

    Args:
        examples: stepwise examples, one trajectory each (``[]`` gives ``[]``).

    Returns:
        New :class:`StepwiseExample` s: the same prompt and completions, ``labels = [y] * T``.

    Raises:
        TypeError: ``examples`` is not a sequence of :class:`StepwiseExample`.
        ValueError: an example with no steps, a label count that differs from its step count, or a
            last label other than 0 or 1 (naming the example's index and the value).
    """
    out = []
    for i, ex in enumerate(_checked_trajectories(examples)):
        y = _outcome(i, ex)
        out.append(StepwiseExample(ex.prompt, list(ex.completions), [y] * len(ex.completions), extra=dict(ex.extra)))
    return out


def prompt_value_examples(examples: Sequence[StepwiseExample]) -> list[StepwiseExample]:
    """Examples of the prompt-only value ``V_0``: one per distinct prompt (first-seen order), its one
    step :data:`PROMPT_STEP` (empty) labelled with the mean outcome of the prompt's trajectories
    (the share won) and progress 0.

    Give it the policy's own trajectories only: branch examples (a trajectory's first steps and a
    chosen other step) do not start from the prompt under the policy and would bias the mean.

    Raises:
        as :func:`outcome_examples`.
    """
    sums: dict[str, list[float]] = {}
    for i, ex in enumerate(_checked_trajectories(examples)):
        y = _outcome(i, ex)
        sums.setdefault(ex.prompt, []).append(y)
    return [StepwiseExample(p, [PROMPT_STEP], [float(np.mean(ys))], progress=[0.0]) for p, ys in sums.items()]


class ImplicitPRM(TextCritic):
    """Step rewards as differences of an outcome-trained value model's values.

    ``value_model`` is any :class:`TextCritic` whose ``success`` head is the value ``V`` of a prefix
    (the probability of success from it), e.g. a :class:`~prm_critic.text.MiniLMStepPRM` trained on
    :func:`outcome_examples`. For a step ``t`` (its ``TextStep`` holds the prompt, the ``t - 1``
    earlier steps and the step)::

        V_t     = value_model.score([TextStep(prompt, history, step)]).success
        V_{t-1} = value_model.score([TextStep(prompt, history[:-1], history[-1])]).success   (t > 1)
        V_0     = value_model.score([TextStep(prompt, (), "")]).success    baseline="prompt"
                = baseline                                                 baseline a float in [0, 1]
        r_t     = V_t - V_{t-1}   in [-1, 1];   sum_{t=1..T} r_t = V_T - V_0

    Scores (:class:`~prm_critic.critic.StepScores`):

    * ``success`` = ``V_t``, the implied value: what the searches rank by and what dead-end
      thresholds cut, so a search with this critic is the search with the value model itself;
    * ``progress`` = ``(1 + r_t) / 2``, the reward mapped into [0, 1] (0.5: the step left the value
      unchanged; above: it raised it);
    * ``extra[REWARD]`` (``"implicit_reward"``) = ``r_t``; ``extra[VALUE_PREV]`` (``"value_prev"``) =
      ``V_{t-1}``; the value model's own ``extra`` arrays for the step are kept under their names.

    One call scores each step and its previous prefix in one batch to the value model (a
    :class:`MiniLMStepPRM` reads a step and its parent from one forward row), plus, with
    ``baseline="prompt"``, one short prompt-only row per distinct prompt among first steps.

    ``baseline="prompt"`` scores the prompt followed by one empty step (:data:`PROMPT_STEP`): the
    prompt alone, read at a step separator under the value model's step contract. A model never
    trained on such a step extrapolates there; train it with :func:`prompt_value_examples` as well.
    A float ``baseline`` is the same ``V_0`` for every prompt (e.g. the policy's success rate on the
    training trajectories); it changes only the first step's reward.

    Args:
        value_model: the outcome-trained value model (a :class:`TextCritic`).
        baseline: ``"prompt"`` (default) or a float in [0, 1]: how ``V_0`` is obtained (above).

    Raises:
        TypeError: ``value_model`` is not a :class:`TextCritic` (e.g. a control critic or a robot
            state critic), or ``baseline`` is neither ``"prompt"`` nor a number.
        ValueError: a numeric ``baseline`` outside [0, 1].
    """

    def __init__(self, value_model: TextCritic, *, baseline: str | float = "prompt"):
        if not isinstance(value_model, TextCritic):
            raise TypeError(f"value_model: expected a text critic (prm_critic.text.TextCritic) whose success head is "
                            f"the value of a prefix, got {type(value_model).__name__}")
        if isinstance(value_model, ImplicitPRM):
            raise TypeError("value_model: expected the value model itself, got an ImplicitPRM (its success head is "
                            "already the value; wrap the value model once)")
        if isinstance(baseline, str):
            validate.check_choice("baseline", baseline, ("prompt",))
        else:
            baseline = validate.check_prob("baseline", baseline, noun="'prompt' or a value")
        self.value_model = value_model
        self.baseline = baseline

    # ------------------------------------------------------------------ scoring
    def _batch(self, steps: list[TextStep]) -> tuple[list[TextStep], list[int]]:
        """``(batch, prev)``: the value model's batch (the steps first, then each distinct previous
        prefix not among them) and, per step, the index in ``batch`` of its previous prefix (-1: ``V_0`` is the float baseline)."""
        batch = list(steps)
        index: dict[tuple[str, tuple[str, ...], str], int] = {}
        for i, s in enumerate(steps):  # a previous prefix that is itself in the batch is read from there
            index.setdefault((s.prompt, s.history, s.step), i)
        prev = []
        for s in steps:
            if s.history:
                key = (s.prompt, s.history[:-1], s.history[-1])
            elif self.baseline == "prompt":
                key = (s.prompt, (), PROMPT_STEP)
            else:
                prev.append(-1)
                continue
            if key not in index:
                index[key] = len(batch)
                batch.append(TextStep(*key))
            prev.append(index[key])
        return batch, prev

    def _combine(self, n: int, prev: list[int], out: StepScores, batch_len: int) -> StepScores:
        if not isinstance(out, StepScores) or len(out) != batch_len:
            got = f"{len(out)} scores" if isinstance(out, StepScores) else type(out).__name__
            raise ValueError(f"value_model: expected StepScores for the {batch_len} steps it was given, got {got}")
        v = np.asarray(out.success, np.float64)
        if not np.all(np.isfinite(v)) or np.any(v < 0) or np.any(v > 1):
            raise ValueError(f"value_model: expected success values in [0, 1], got min {float(np.nanmin(v))!r} max "
                             f"{float(np.nanmax(v))!r} ({type(self.value_model).__name__})")
        vt = v[:n]
        idx = np.asarray(prev, np.int64)
        vprev = np.where(idx >= 0, v[np.maximum(idx, 0)], float(self.baseline) if self.baseline != "prompt" else 0.0)
        r = vt - vprev
        extra = {k: np.asarray(a)[:n] for k, a in out.extra.items() if k not in (REWARD, VALUE_PREV)}
        extra[REWARD] = r.astype(np.float32)
        extra[VALUE_PREV] = vprev.astype(np.float32)
        return StepScores(np.clip((1.0 + r) / 2.0, 0.0, 1.0), vt, extra)

    def score(self, steps: Sequence[TextStep]) -> StepScores:
        """Score ``B`` text steps: ``success = V_t``, ``progress = (1 + r_t) / 2``, ``extra["implicit_reward"] = r_t``."""
        steps = check_text_steps(steps)
        batch, prev = self._batch(steps)
        return self._combine(len(steps), prev, self.value_model.score(batch), len(batch))

    async def ascore(self, steps: Sequence[TextStep]) -> StepScores:
        """As :meth:`score`, through the value model's ``ascore``."""
        steps = check_text_steps(steps)
        batch, prev = self._batch(steps)
        return self._combine(len(steps), prev, await self.value_model.ascore(batch), len(batch))

    def score_trajectory(self, prompt: str, steps: Sequence[str]) -> StepScores:
        """Score all ``T`` steps of one trajectory (one value-model call): StepScores ``(T,)``;
        ``extra["implicit_reward"].sum() == V_T - V_0`` up to float error."""
        return self.score(TextStep.prefixes(prompt, validate.check_list("steps", steps, str, noun="step")))

    def critic_info(self) -> CriticInfo:
        """The value model's declaration."""
        return self.value_model.critic_info()

    def __repr__(self) -> str:
        return f"ImplicitPRM({type(self.value_model).__name__}, baseline={self.baseline!r})"
