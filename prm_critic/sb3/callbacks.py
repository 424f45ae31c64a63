"""SB3 callbacks: PRM statistics to the logger, and success evaluation on the unshaped env.

* :class:`PRMStatsCallback` records, over a window of the last ``window`` episodes / steps::

      prm/phi_mean            mean_t info_t["prm_phi"]            (potential of the visited states)
      prm/shaping_mean        mean_t info_t["prm_shaping"]        (the shaping term per step)
      prm/ep_return_shaped    mean episode sum of the reward the learner sees
      prm/ep_return_original  mean episode sum of info["prm_original_reward"]
      prm/pruned_episodes     count of episodes the dead-end pruner truncated (since start)
      prm/pruned_frac         fraction of the window's episodes that were pruned
      prm/train_success       fraction of the window's episodes that succeeded (spec rule)
      prm/subgoal_hit/<name>  fraction of the window's episodes in which subgoal <name> held

  The episode values come from :class:`~prm_critic.sb3.monitor.PRMMonitor`'s ``info["episode"]``.
  Without it (SB3's own ``Monitor`` before or after the shaper, or none) the callback sums each
  env's episode itself from the step's ``rewards`` and ``info["prm_original_reward"]``, so the two
  returns are never each other's; ``prm/train_success`` and the subgoal hits need ``PRMMonitor``
  (the spec's success rule) and are not logged without it.

* :class:`UnshapedSuccessEval` runs ``n_episodes`` deterministic episodes every ``eval_freq``
  env steps on a separate env built **without** shaper or pruner, and appends a row
  ``env_steps, success_rate, mean_return, std_return, mean_length, train_wall_s, eval_wall_s``
  to a CSV (atomically: the whole file is rewritten to a temp file then ``os.replace``-d).
  Episode ``i`` of every evaluation resets with ``seed = eval_seed + i``: every evaluation (and
  every config of a benchmark) sees the same start and goal states.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic._io import atomic_write_bytes
from prm_critic.robotics.spec import TaskSpec, load_spec
from prm_critic.sb3.monitor import step_success

require("stable_baselines3.common.callbacks")  # a missing extra fails here with the exact ``pip install`` to run
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

__all__ = ["PRMStatsCallback", "UnshapedSuccessEval", "run_episodes", "StopOnSuccess", "ShapingScaleSchedule", "TqdmCallback", "EVAL_COLUMNS", "read_eval_csv", "append_csv_row"]

EVAL_COLUMNS = ("env_steps", "success_rate", "mean_return", "std_return", "mean_length", "n_episodes",
                "train_wall_s", "eval_wall_s")


def append_csv_row(path: str | os.PathLike, columns: tuple[str, ...], row: dict[str, Any]) -> None:
    """Append ``row`` to the CSV at ``path`` atomically (rewrite to a temp file + ``os.replace``)."""
    path = Path(path)
    old = path.read_text() if path.exists() else ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    if not old:
        w.writeheader()
    w.writerow({k: row[k] for k in columns})
    atomic_write_bytes(path, (old + buf.getvalue()).encode())


def read_eval_csv(path: str | os.PathLike) -> list[dict[str, float]]:
    """Rows of an eval CSV as dicts of floats."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def check_shaping_gamma(model: Any, venv: Any) -> None:
    """Refuse a potential-based shaper in ``venv`` whose gamma is not ``model.gamma``: the shaping keeps
    the optimal policy only under the learner's own discount (what :class:`PRMStatsCallback` checks at
    training start; ``train_policy`` and the zoo's ``PRMWrapper`` take the algorithm's gamma)."""
    import math

    from prm_critic.wrappers._common import shapers_in

    model_gamma = getattr(model, "gamma", None)
    if model_gamma is None:
        return
    for shaper in shapers_in(venv):
        if shaper.mode == "potential" and not math.isclose(shaper.gamma, float(model_gamma), rel_tol=0.0, abs_tol=1e-12):
            raise ValueError(
                f"gamma: the {type(shaper).__name__} shapes with gamma={shaper.gamma}, but {type(model).__name__}'s "
                f"model.gamma is {float(model_gamma)}; potential-based shaping keeps the optimal policy only with the "
                "learner's own discount: build the shaper with gamma=model.gamma")


class PRMStatsCallback(BaseCallback):
    """Record PRM statistics (see module docstring) to the SB3 logger.

    Args:
        window: number of recent episodes (and ``100 * window`` steps) averaged.
    """

    def __init__(self, window: int = 100, verbose: int = 0):
        super().__init__(verbose)
        self.window = validate.positive_int("window", window)
        self.episodes: deque = deque(maxlen=window)
        self._phi: deque = deque(maxlen=100 * window)
        self._shaping: deque = deque(maxlen=100 * window)
        self.pruned_episodes = 0
        self.n_episodes = 0
        #: one dict per finished episode: env_steps, r (shaped), r_original, pruned, success, ...
        self.history: list[dict[str, Any]] = []
        self._sums = np.zeros((0, 3))  # per env: shaped return, original return, length of the running episode

    def _on_training_start(self) -> None:
        self._sums = np.zeros((0, 3))  # a (resumed) run starts new episodes
        check_shaping_gamma(self.model, self.training_env)

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", [])
        rewards, dones = self.locals.get("rewards"), self.locals.get("dones")
        if len(self._sums) != len(infos):
            self._sums = np.zeros((len(infos), 3))
        for i, info in enumerate(infos):
            if "prm_phi" in info:
                self._phi.append(float(np.mean(info["prm_phi"])))
            if "prm_shaping" in info:
                self._shaping.append(float(np.mean(info["prm_shaping"])))
            r = float(np.asarray(rewards).reshape(-1)[i]) if rewards is not None else float("nan")
            self._sums[i] += (r, float(info.get("prm_original_reward", r)), 1.0)
            ep = self._episode_of(info)
            done = bool(np.asarray(dones).reshape(-1)[i]) if dones is not None else ep is not None
            if ep is not None and "r_original" not in ep or ep is None and done:
                # SB3's Monitor (which sums whichever reward it sees: the shaped one after the shaper, the env's
                # before it) or no monitor: this episode's two returns as summed here
                ep = {**(ep or {}), "r": self._sums[i, 0], "r_original": self._sums[i, 1], "l": int(self._sums[i, 2]),
                      "pruned": bool(info.get("prm_pruned", False))}
            if done or ep is not None:
                self._sums[i] = 0.0
            if ep is not None:
                self.n_episodes += 1
                self.pruned_episodes += int(bool(ep.get("pruned", False)))
                self.episodes.append(ep)
                self.history.append({"env_steps": self.num_timesteps, "r": float(ep["r"]),
                                     "r_original": float(ep.get("r_original", ep["r"])),
                                     "l": int(ep["l"]), "pruned": bool(ep.get("pruned", False)),
                                     "success": bool(ep.get("success", False))})
        self._record()
        return True

    def _episode_of(self, info: dict[str, Any]) -> dict[str, Any] | None:
        """The finished episode's record in a step's ``info`` (``r`` = the shaped return, ``r_original``,
        ``l``, ``pruned``, ``success``, ``subgoals``), or ``None`` when the step ended no episode:
        :class:`~prm_critic.sb3.monitor.PRMMonitor`'s ``info["episode"]``."""
        return info.get("episode")

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (for resumable training)."""
        from prm_critic.sb3.resume import to_jsonable

        return to_jsonable({"history": self.history, "episodes": list(self.episodes), "phi": list(self._phi),
                            "shaping": list(self._shaping), "pruned_episodes": self.pruned_episodes,
                            "n_episodes": self.n_episodes})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.history = list(state["history"])
        self.episodes.extend(state["episodes"])
        self._phi.extend(state["phi"])
        self._shaping.extend(state["shaping"])
        self.pruned_episodes = int(state["pruned_episodes"])
        self.n_episodes = int(state["n_episodes"])

    def _record(self) -> None:
        lg = self.logger
        if self._phi:
            lg.record("prm/phi_mean", float(np.mean(self._phi)))
        if self._shaping:
            lg.record("prm/shaping_mean", float(np.mean(self._shaping)))
        lg.record("prm/pruned_episodes", self.pruned_episodes)
        if not self.episodes:
            return
        eps = list(self.episodes)
        lg.record("prm/ep_return_shaped", float(np.mean([e["r"] for e in eps])))
        lg.record("prm/ep_return_original", float(np.mean([e.get("r_original", e["r"]) for e in eps])))
        lg.record("prm/pruned_frac", float(np.mean([bool(e.get("pruned", False)) for e in eps])))
        judged = [bool(e["success"]) for e in eps if "success" in e]  # PRMMonitor's spec rule
        if judged:
            lg.record("prm/train_success", float(np.mean(judged)))
        names = sorted({k for e in eps for k in e.get("subgoals", {})})
        for n in names:
            lg.record(f"prm/subgoal_hit/{n}", float(np.mean([bool(e.get("subgoals", {}).get(n, False)) for e in eps])))


def run_episodes(model, env, spec: TaskSpec, *, n_episodes: int, seed: int, deterministic: bool = True,
                 evaluator=None, layout=None, after_step: Callable[[int], None] | None = None,
                 ) -> tuple[list[bool], list[float], list[int]]:
    """``(successes, returns, lengths)`` of ``n_episodes`` episodes of ``model`` on ``env``, episode
    ``i`` reset with ``seed + i``: the one evaluation loop (:class:`UnshapedSuccessEval`,
    :func:`prm_critic.sb3.evaluate_policy`).

    An episode succeeds by the spec's success rule (``"any"``: at some step; else at its last step);
    its return is the sum of ``env``'s rewards. ``evaluator`` and ``layout`` are the spec's subgoals
    when success comes from them. ``after_step(i)`` is called after the reset and after every step of
    episode ``i`` (to render a frame).
    """
    from prm_critic.sb3.train import predict

    successes, returns, lengths = [], [], []
    for i in range(n_episodes):
        obs, info = env.reset(seed=seed + i)
        if after_step is not None:
            after_step(i)
        done, ret, n, ok_any, ok_last = False, 0.0, 0, False, False
        while not done:
            action, _ = predict(model, obs, deterministic=deterministic)
            obs, r, term, trunc, info = env.step(action)
            if after_step is not None:
                after_step(i)
            ret += float(r)
            n += 1
            ok_last = step_success(spec, info, obs, term, evaluator, layout, truncated=trunc)
            ok_any |= ok_last
            done = term or trunc
        successes.append(ok_any if spec.success.rule == "any" else ok_last)
        returns.append(ret)
        lengths.append(n)
    return successes, returns, lengths


class UnshapedSuccessEval(BaseCallback):
    """Deterministic success evaluation on an env without shaper or pruner (module docstring).

    Observations are normalised with the model's ``VecNormalize`` statistics when it has them.

    A row at env step ``N`` evaluates the policy as it was when step ``N`` was collected (SB3 calls
    callbacks before that step's gradient updates). When training ends, a final row taken before the
    last gradient updates is evaluated again and replaced, so that the last row always describes
    the policy that is saved.

    Args:
        spec: task spec (success source and rule).
        eval_env: a plain gymnasium env (``make_env(spec)``); built from ``spec`` when ``None``.
        eval_freq: evaluate every ``eval_freq`` env steps (summed over vector envs); > 0.
        n_episodes: episodes per evaluation; > 0.
        csv_path: where rows are appended (``None``: keep them in ``self.rows`` only).
        eval_seed: episode ``i`` resets with ``seed = eval_seed + i``.
        eval_at_start: also evaluate the untrained policy at step 0.
        deterministic: use the deterministic policy (the mean action).
    """

    def __init__(self, spec: "str | TaskSpec", eval_env=None, *, eval_freq: int, n_episodes: int = 50,
                 csv_path: str | os.PathLike | None = None, eval_seed: int = 10_000, eval_at_start: bool = True,
                 deterministic: bool = True, verbose: int = 0):
        super().__init__(verbose)
        for name, v in (("eval_freq", eval_freq), ("n_episodes", n_episodes)):
            validate.positive_int(name, v)
        self.spec = load_spec(spec)
        if eval_env is None:
            from prm_critic.robotics.make import make_env

            eval_env = make_env(self.spec)
        self.eval_env = eval_env
        self.eval_freq = eval_freq
        self.n_episodes = n_episodes
        self.csv_path = Path(csv_path) if csv_path is not None else None
        self.eval_seed = int(eval_seed)
        self.eval_at_start = eval_at_start
        self.deterministic = deterministic
        self.rows: list[dict[str, float]] = []
        self._next = eval_freq
        self._t0 = 0.0
        self._eval_wall = 0.0          # evaluation wall-clock since the run began (resumes included)
        self._eval_wall_at_start = 0.0
        self._train_wall0 = 0.0        # training wall-clock before this learn() call (a resumed run)
        self._last_eval_step = -1
        self._updates_at_eval = None   # the model's gradient-update count when the last row was taken
        self._evaluator = self._layout = None
        if self.spec.success.reads_state:
            from prm_critic.robotics.subgoals import SubgoalCritic

            crit = SubgoalCritic(self.spec, eval_env)
            self._evaluator, self._layout = crit.evaluator, crit.layout

    def evaluate(self, model) -> dict[str, float]:
        """Run the evaluation episodes with ``model``; returns the row (without appending it)."""
        successes, returns, lengths = run_episodes(model, self.eval_env, self.spec, n_episodes=self.n_episodes,
                                                   seed=self.eval_seed, deterministic=self.deterministic,
                                                   evaluator=self._evaluator, layout=self._layout)
        return {"success_rate": float(np.mean(successes)), "mean_return": float(np.mean(returns)),
                "std_return": float(np.std(returns)), "mean_length": float(np.mean(lengths)),
                "n_episodes": self.n_episodes}

    def _run_eval(self, replace_last: bool = False) -> None:
        t = time.perf_counter()
        row = self.evaluate(self.model)
        self._eval_wall += time.perf_counter() - t
        row["env_steps"] = self.num_timesteps
        row["eval_wall_s"] = round(self._eval_wall, 3)
        row["train_wall_s"] = round(self.train_wall(), 3)
        if replace_last:
            self.rows[-1] = row
        else:
            self.rows.append(row)
        self._last_eval_step = self.num_timesteps
        self._updates_at_eval = getattr(self.model, "_n_updates", None)
        if self.csv_path is not None:
            if replace_last:
                self._write_csv()
            else:
                append_csv_row(self.csv_path, EVAL_COLUMNS, row)
        self.logger.record("eval/unshaped_success_rate", row["success_rate"])
        self.logger.record("eval/unshaped_mean_return", row["mean_return"])
        if self.verbose:
            print(f"[eval] steps={row['env_steps']} success={row['success_rate']:.2f} return={row['mean_return']:.2f}")

    def train_wall(self) -> float:
        """Training wall-clock (evaluations excluded) since the run began, resumes included."""
        return self._train_wall0 + (time.perf_counter() - self._t0) - (self._eval_wall - self._eval_wall_at_start)

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (for resumable training)."""
        return {"rows": [dict(r) for r in self.rows], "last_eval_step": self._last_eval_step,
                "train_wall_s": self.train_wall(), "eval_wall_s": self._eval_wall}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; the CSV is rewritten to exactly those rows (an
        evaluation logged after the checkpoint is dropped: it will be run again)."""
        self.rows = [dict(r) for r in state["rows"]]
        self._last_eval_step = int(state["last_eval_step"])
        self._train_wall0 = float(state["train_wall_s"])
        self._eval_wall = float(state["eval_wall_s"])
        if self.csv_path is not None:
            self._write_csv()

    def _write_csv(self) -> None:
        """Rewrite the CSV (atomically) to exactly ``self.rows``."""
        assert self.csv_path is not None, "_write_csv runs only for an evaluator with a csv_path"
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(EVAL_COLUMNS), lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: r[k] for k in EVAL_COLUMNS})
        atomic_write_bytes(self.csv_path, buf.getvalue().encode())

    def _on_training_start(self) -> None:
        self._t0 = time.perf_counter()
        self._eval_wall_at_start = self._eval_wall
        self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq
        if self.eval_at_start and self.num_timesteps == 0:
            self._run_eval()

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq
            self._run_eval()
        return True

    def _on_training_end(self) -> None:
        if self._last_eval_step != self.num_timesteps:
            self._run_eval()
        elif self._updates_at_eval != getattr(self.model, "_n_updates", None):
            # the row at this step predates the last gradient updates: evaluate the final policy
            self._run_eval(replace_last=True)


class StopOnSuccess(BaseCallback):
    """Stop training once the verdict is decided: the last ``consecutive`` rows of ``evaluator`` (an
    :class:`UnshapedSuccessEval` placed before this callback) are all at or above ``threshold`` and
    the last one was taken at ``min_steps`` env steps or later. ``stopped_at`` is the env step of
    the stop (``None``: not stopped)."""

    def __init__(self, evaluator: UnshapedSuccessEval, *, threshold: float = 0.8, consecutive: int = 2,
                 min_steps: int = 0, verbose: int = 0):
        super().__init__(verbose)
        if not isinstance(evaluator, UnshapedSuccessEval):
            raise ValueError(f"evaluator: expected an UnshapedSuccessEval, got {type(evaluator).__name__}")
        self.evaluator = evaluator
        self.threshold = validate.check_prob("threshold", threshold, noun="a success rate")
        self.consecutive = validate.positive_int("consecutive", consecutive, unit="evaluations")
        if isinstance(min_steps, bool) or not isinstance(min_steps, int) or min_steps < 0:
            raise ValueError(f"min_steps: expected an integer >= 0 (env steps), got {min_steps!r}")
        self.min_steps = min_steps
        self.stopped_at: int | None = None
        self._seen = 0

    def decided(self) -> bool:
        """Whether the evaluator's rows so far meet the stopping rule."""
        rows = self.evaluator.rows
        last = rows[-self.consecutive:]
        return (len(last) == self.consecutive and all(r["success_rate"] >= self.threshold for r in last)
                and int(last[-1]["env_steps"]) >= self.min_steps)

    def _on_step(self) -> bool:
        if len(self.evaluator.rows) == self._seen:  # no new evaluation: nothing to decide
            return True
        self._seen = len(self.evaluator.rows)
        if self.decided():
            self.stopped_at = int(self.num_timesteps)
            if self.verbose:
                print(f"[stop] {self.consecutive} evaluations at or above {self.threshold:g} by step {self.stopped_at}")
            return False
        return True


class ShapingScaleSchedule(BaseCallback):
    """Anneal the shaping scale linearly over env steps ``t``::

        scale(t) = start + (end - start) * min(t / steps, 1)

    The shapers of the training env (``set_scale``) and the replay buffer
    (:meth:`~prm_critic.sb3.her.PRMHerReplayBuffer.set_shaping_scale`) get the new value together, at
    training start and at the end of every rollout (after its transitions are stored, before the
    gradient steps that sample them), so each stored transition records the scale it was paid at and
    every sampled reward, real or HER-relabelled, is paid at today's scale. Needs the model's replay
    buffer to be a ``PRMHerReplayBuffer`` (``train_policy(her=True, shaping="potential")``); a plain
    buffer would keep the rewards of old steps at their old scale, so it is refused. The schedule is a
    function of the step count alone: a resumed run continues it where it stopped.

    Args:
        start: the scale at step 0 (> 0; ``train_policy``'s ``scale``).
        end: the scale from ``steps`` on (>= 0).
        steps: env steps over which the scale moves from ``start`` to ``end`` (> 0).
    """

    def __init__(self, start: float, end: float, steps: int, verbose: int = 0):
        super().__init__(verbose)
        self.start = validate.check_number("start", start, positive=True)
        self.end = validate.check_number("end", end, low=0.0)
        self.steps = validate.positive_int("steps", steps, unit="env steps")
        self.current: float | None = None
        self._buffer: Any = None

    def value(self, t: int) -> float:
        """The scale at env step ``t``."""
        return self.start + (self.end - self.start) * min(int(t) / self.steps, 1.0)

    def _apply(self) -> None:
        v = self.value(self.num_timesteps)
        if v == self.current:
            return
        self.training_env.env_method("set_scale", v)
        assert self._buffer is not None  # set at training start, before any _apply
        self._buffer.set_shaping_scale(v)
        self.current = v
        self.logger.record("prm/shaping_scale", v)

    def _on_training_start(self) -> None:
        from prm_critic.sb3.her import PRMHerReplayBuffer

        rb = getattr(self.model, "replay_buffer", None)
        if not isinstance(rb, PRMHerReplayBuffer):
            raise ValueError(f"ShapingScaleSchedule: needs the model's replay buffer to be a PRMHerReplayBuffer "
                             f"(train_policy with her=True and shaping='potential'), got {type(rb).__name__}; "
                             "another buffer keeps old rewards at their old scale")
        self._buffer = rb
        self.current = None
        self._apply()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self._apply()


class TqdmCallback(BaseCallback):
    """A tqdm progress bar over env steps, on stderr (tqdm only; SB3's own bar also needs ``rich``).

    The bar counts env steps (``num_envs`` per vector step) from the model's current step count (a
    resumed run starts where it stopped) up to ``total``, with the rate and the time left (ETA).

    Args:
        total: the env-step budget shown as 100% (a positive integer).
        desc: the bar's label.
    """

    def __init__(self, total: int, desc: str = "train"):
        super().__init__()
        self.total = validate.positive_int("total", total, unit="env steps")
        self.desc = str(desc)
        self._bar = None

    def _on_training_start(self) -> None:
        tqdm = require("tqdm.auto", "train").tqdm

        self._bar = tqdm(total=self.total, initial=self.num_timesteps, unit="step", desc=self.desc,
                         dynamic_ncols=True)

    def _on_step(self) -> bool:
        if self._bar is not None:
            self._bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the bar (idempotent); ``train_policy`` calls it also when training raises."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
