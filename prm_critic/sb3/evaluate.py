"""Evaluate a saved policy on its own task: unshaped success and return over seeded episodes.

:func:`evaluate_policy` loads a policy checkpoint (``policy.safetensors`` + ``policy.json``, written by
:func:`prm_critic.sb3.train_policy`), builds the task env from the spec stored in ``policy.json`` (no
shaper, no pruner: the env's own reward) and runs ``episodes`` episodes, episode ``i`` reset with
``seed + i``, with the same loop and success rule as the training-time evaluation
(:class:`~prm_critic.sb3.callbacks.UnshapedSuccessEval`, whose default seeds are the same). Where the
env renders (``render_mode="rgb_array"``), the frames of the first ``video_episodes`` episodes are kept.

Intervals are 95 %: Wilson's for the success rate, ``mean +- 1.96 * sd / sqrt(n)`` (the normal
approximation) for the mean return.
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic import validate
from prm_critic.robotics.spec import load_spec

__all__ = ["PolicyEvaluation", "evaluate_policy", "save_evaluation", "EVAL_SEED"]

#: the first episode's seed, the training-time evaluation's default (``UnshapedSuccessEval(eval_seed=)``)
EVAL_SEED = 10_000
_Z95 = 1.959963984540054
#: what makes an evaluation this evaluation (its run record; the policy by its files' hash)
_SETTINGS = ("policy", "policy_sha256", "task", "env_id", "seed", "deterministic", "n_episodes")


def _wilson(k: int, n: int) -> tuple[float, float]:
    p, z2 = k / n, _Z95 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # exact at the ends (rounding would put 0 successes a hair above 0)
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


@dataclass(frozen=True)
class PolicyEvaluation:
    """What :func:`evaluate_policy` measured: one entry per episode, and the summaries.

    ``frames`` holds, for each recorded episode, its frames ``(T + 1, H, W, 3)`` uint8 (the reset and
    every step); empty without ``video_episodes``.
    """

    policy: str
    policy_sha256: str | None
    task: str
    env_id: str
    seed: int
    deterministic: bool
    successes: tuple[bool, ...]
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    frames: tuple[np.ndarray, ...] = field(default=(), repr=False)

    @property
    def n_episodes(self) -> int:
        return len(self.successes)

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes))

    @property
    def success_interval(self) -> tuple[float, float]:
        """Wilson 95 % interval of the success rate."""
        return _wilson(int(sum(self.successes)), self.n_episodes)

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def return_interval(self) -> tuple[float, float]:
        """95 % interval of the mean return (normal approximation; a point for one episode)."""
        n = self.n_episodes
        half = _Z95 * float(np.std(self.returns, ddof=1)) / math.sqrt(n) if n > 1 else 0.0
        return self.mean_return - half, self.mean_return + half

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary and per-episode values (without the frames)."""
        return {"policy": self.policy, "policy_sha256": self.policy_sha256, "task": self.task, "env_id": self.env_id, "seed": self.seed,
                "deterministic": self.deterministic, "n_episodes": self.n_episodes,
                "success_rate": self.success_rate, "success_interval": list(self.success_interval),
                "mean_return": self.mean_return, "return_interval": list(self.return_interval),
                "mean_length": self.mean_length, "successes": list(self.successes),
                "returns": list(self.returns), "lengths": list(self.lengths)}

    def lines(self) -> list[str]:
        """The summary ``prm-critic evaluate`` prints."""
        (s_lo, s_hi), (r_lo, r_hi) = self.success_interval, self.return_interval
        last = self.seed + self.n_episodes - 1
        mode = "deterministic" if self.deterministic else "stochastic"
        return [
            f"{self.policy} on {self.task} ({self.env_id}): {self.n_episodes} episodes, seeds {self.seed}-{last}, "
            f"{mode} actions, no shaping",
            f"success rate  {self.success_rate:.3f}  (95% interval {s_lo:.3f}-{s_hi:.3f}; "
            f"{int(sum(self.successes))} of {self.n_episodes})",
            f"mean return   {self.mean_return:.3f}  (95% interval {r_lo:.3f} to {r_hi:.3f}; the env's own reward)",
            f"mean length   {self.mean_length:.1f} steps",
        ]


def _files_sha256(path: Path) -> str:
    """SHA-256 over the checkpoint's weights and JSON (what the policy's scores depend on)."""
    from prm_critic._io import checkpoint_paths
    from prm_critic.integrity import sha256_bytes

    w, j = checkpoint_paths(path)
    return sha256_bytes(sha256_bytes(w.read_bytes()).encode() + sha256_bytes(j.read_bytes()).encode())


def _policy_path(policy: "str | os.PathLike") -> Path:
    """A train-policy output folder gives its ``policy`` checkpoint; a path or stem is kept."""
    p = Path(policy)
    return p / "policy" if p.is_dir() else p


def evaluate_policy(policy: Any, *, task: Any = None, episodes: int = 50, seed: int = EVAL_SEED,
                    deterministic: bool = True, video_episodes: int = 0, device: str = "cpu") -> PolicyEvaluation:
    """Run a saved policy on its own task, unshaped, over ``episodes`` seeded episodes.

    Args:
        policy: a policy checkpoint (a train-policy output folder, ``policy.json``, ``.safetensors`` or
            their stem), or a model returned by :func:`prm_critic.sb3.load_policy`.
        task: the task the caller expects (a built-in name, a spec file or a ``TaskSpec``); refused
            when it is not the task stored in the checkpoint. ``None``: the checkpoint's task.
        episodes: number of episodes; episode ``i`` resets with ``seed + i``.
        seed: the first episode's seed (default: the training-time evaluation's).
        deterministic: the mean action (``False``: sample from the policy).
        video_episodes: keep the rendered frames of this many first episodes (``render_mode="rgb_array"``;
            MuJoCo without a display renders with ``MUJOCO_GL=egl``).
        device: torch device of the policy (SBX runs where JAX puts it).

    Returns:
        A :class:`PolicyEvaluation`.

    Raises:
        PolicyCheckpointError: a missing or unreadable checkpoint (see :func:`load_policy`).
        ValueError: a ``task`` other than the checkpoint's; an env that cannot render with ``video_episodes``.
    """
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3.callbacks import run_episodes
    from prm_critic.sb3.checkpoint import load_policy

    episodes = validate.positive_int("episodes", episodes)
    seed = validate.check_seed("seed", seed)
    deterministic = validate.check_flag("deterministic", deterministic)
    video_episodes = validate.check_int("video_episodes", video_episodes, minimum=0)
    if video_episodes > episodes:
        raise validate.ArgumentError(f"video_episodes: expected at most episodes={episodes}, got {video_episodes}")
    if isinstance(policy, (str, os.PathLike)):
        where = _policy_path(policy)
        model = load_policy(where, device=device)
        name, sha = str(where), _files_sha256(where)
    elif isinstance(getattr(policy, "prm_checkpoint", None), dict):
        model, name, sha = policy, "the given model", None
    else:
        raise validate.ArgumentError(f"policy: expected a policy checkpoint path or a model from load_policy, "
                                     f"got {type(policy).__name__}")
    meta = model.prm_checkpoint
    spec = load_spec(meta["spec"])
    if task is not None:
        wanted = load_spec(task)
        if (wanted.name, wanted.env_id) != (spec.name, spec.env_id):
            raise ValueError(f"task: the policy {name} was trained on {spec.name!r} ({spec.env_id}, its policy.json), "
                             f"not {wanted.name!r} ({wanted.env_id}); evaluate it on its own task (leave task out)")
    env = make_env(spec, render_mode="rgb_array" if video_episodes else None)
    frames: list[list[np.ndarray]] = [[] for _ in range(video_episodes)]

    def keep_frame(i: int) -> None:
        if i < video_episodes:
            frames[i].append(_render(env, spec.env_id))

    try:
        evaluator = layout = None
        if spec.success.reads_state:
            critic = SubgoalCritic(spec, env)
            evaluator, layout = critic.evaluator, critic.layout
        successes, returns, lengths = run_episodes(
            model, env, spec, n_episodes=episodes, seed=seed, deterministic=deterministic, evaluator=evaluator,
            layout=layout, after_step=keep_frame if video_episodes else None)
    finally:
        env.close()
    return PolicyEvaluation(policy=name, policy_sha256=sha, task=spec.name, env_id=spec.env_id, seed=seed, deterministic=deterministic,
                            successes=tuple(bool(s) for s in successes), returns=tuple(float(r) for r in returns),
                            lengths=tuple(int(n) for n in lengths), frames=tuple(np.stack(f) for f in frames))


def _render(env, env_id: str) -> np.ndarray:
    try:
        frame = env.render()
    except Exception as exc:  # MuJoCo's FatalError (no OpenGL context) and gymnasium's errors alike
        raise ValueError(f"video_episodes: {env_id} could not render a frame ({type(exc).__name__}: {exc}); without a "
                         "display, set MUJOCO_GL=egl (or osmesa) before starting Python, or record no video") from exc
    if not isinstance(frame, np.ndarray) or frame.ndim != 3:
        raise ValueError(f"video_episodes: {env_id} rendered {type(frame).__name__}, expected an RGB array (H, W, 3)")
    return frame


def save_evaluation(evaluation: PolicyEvaluation, out: "str | os.PathLike", *, overwrite: bool = False,
                    fps: int = 25) -> list[Path]:
    """Write ``out/evaluation.json`` (:meth:`PolicyEvaluation.to_dict`) and each recorded episode as
    ``out/episode_SEED.gif`` (Pillow, installed with matplotlib by the ``torch`` extra); returns the
    paths. ``out`` holding another evaluation (another policy file, task, seeds or settings; its record
    is ``out/run.json``) is refused unless ``overwrite``, which replaces it whole."""
    from prm_critic._io import atomic_write_bytes, claim_output, record_diffs, write_record
    from prm_critic._optional import require

    fps = validate.positive_int("fps", fps)
    overwrite = validate.check_flag("overwrite", overwrite)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise validate.ArgumentError(f"out: expected a folder, got the file {str(out)!r}")
    settings = {k: v for k, v in evaluation.to_dict().items() if k in _SETTINGS}
    settings["video_episodes"] = len(evaluation.frames)
    gifs = [out / f"episode_{evaluation.seed + i}.gif" for i in range(len(evaluation.frames))]
    owned = [out / "evaluation.json", *out.glob("episode_*.gif")] if out.is_dir() else []
    claim_output(out, owned, record_diffs(out / "run.json", settings), overwrite=overwrite, what="out",
                 held="a policy evaluation")
    write_record(out / "run.json", settings)
    image: Any = require("PIL.Image", "torch") if gifs else None
    for path, clip in zip(gifs, evaluation.frames):
        buf = io.BytesIO()
        first, *rest = [image.fromarray(f) for f in clip]
        first.save(buf, format="GIF", save_all=True, append_images=rest, duration=round(1000 / fps), loop=0)
        atomic_write_bytes(path, buf.getvalue())
    atomic_write_bytes(out / "evaluation.json", (json.dumps(evaluation.to_dict(), indent=1) + "\n").encode())
    return [out / "evaluation.json", *gifs]
