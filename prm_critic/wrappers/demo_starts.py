"""Start episodes from demonstration states, restored from their exact simulator snapshots.

:class:`DemoStarts` is the "demonstrations as start states" use of demonstrations without a reward
model (a control for a learned potential, and a way of its own to use demonstrations). It goes
directly on the env made by :func:`prm_critic.robotics.make.make_env`, under any reward shaper, so
that the shaper sees the restored state at reset like any other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prm_critic import validate
from prm_critic._optional import require

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["DemoStarts", "observe_restored"]


def observe_restored(env) -> Any:
    """The observation of the state ``env`` is in now (after a snapshot restore), from the env's own
    observation function: Fetch-style ``_get_obs()``, or the mazes' ``_get_obs(point_obs)``.

    Raises:
        ValueError: an env whose observation cannot be read without stepping it.
    """
    base = env.unwrapped
    inner = getattr(base, "point_env", None) or getattr(base, "ant_env", None)
    if inner is not None and hasattr(inner, "_get_obs"):
        point = inner._get_obs()  # the point env returns (obs, info); the ant env, obs
        return base._get_obs(point[0] if isinstance(point, tuple) else point)
    fn = getattr(base, "_get_obs", None)
    if fn is None:
        raise ValueError(f"env {type(base).__name__}: cannot read the observation of a restored state (no _get_obs); "
                         "expected a gymnasium-robotics Fetch or maze env")
    return fn()


class DemoStarts(gym.Wrapper):
    """Start an episode, with probability ``prob``, from a demonstration state instead of the env's reset.

    At each reset the env is reset as usual (its RNGs move as without the wrapper); then, with
    probability ``prob`` (drawn from the wrapper's own generator, seeded by ``reset(seed=...)``), a
    state is drawn uniformly from the demonstrations' states before each one's first success, its
    exact snapshot is restored (simulator and the task's Python state, the goal included) and the
    episode's time limit counts from 0 again. The observation returned is read from the restored env
    and checked against the recorded one (exactly, in the recorded float32): a mismatch is an error,
    never a silent start from another state. ``info["demo_start"]`` is the demonstration row started
    from, or ``None``.

    ``reset(options={"demo_state": row})`` restores that row of the demonstrations (its time-limit
    count kept as recorded), whatever ``prob`` is: how :func:`prm_critic.sb3.demos.add_demos_to_buffer`
    replays whole demonstrations.

    Args:
        env: the task env as made by :func:`~prm_critic.robotics.make.make_env` (no reward wrapper under it).
        demos: :class:`~prm_critic.robotics.demos.Demonstrations` with snapshots, of the env's task.
        prob: the probability in [0, 1] that an episode starts from a demonstration state.
    """

    def __init__(self, env, demos, prob: float = 0.5):
        super().__init__(env)
        from prm_critic.robotics.demos import Demonstrations
        from prm_critic.robotics.snapshot import Snapshotter

        if not isinstance(demos, Demonstrations):
            raise TypeError(f"demos: expected prm_critic.robotics.demos.Demonstrations (load_demos(folder)), got "
                            f"{type(demos).__name__}")
        self.prob = validate.check_prob("prob", prob)
        if not demos.has_snapshots:
            raise ValueError(f"demos: the demonstrations of {str(demos.folder)!r} have no simulator snapshots "
                             "(imported data); starting from their states needs a `prm-critic collect` folder")
        env_id = getattr(env.unwrapped.spec, "id", None) if env.unwrapped.spec is not None else None
        want = demos.spec.env_id
        if env_id is not None and env_id != want:
            raise ValueError(f"demos: demonstrations of {want!r} cannot start episodes of env {env_id!r}")
        self.demos = demos
        self.snap = Snapshotter(env)
        starts: list[int] = []
        for (b, _), L in zip(demos.blocks(), demos.steps_to_success()):
            starts.extend(range(b, b + int(L)))
        self._rows = np.asarray(starts, dtype=np.int64)
        self._rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        options = dict(options or {})
        row = options.pop("demo_state", None)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        obs, info = self.env.reset(seed=seed, options=options or None)
        if row is None and self.prob > 0 and self._rng.random() < self.prob:
            row = int(self._rows[self._rng.integers(len(self._rows))])
            obs = self.restore(row, restart_clock=True)
        elif row is not None:
            obs = self.restore(int(row), restart_clock=False)
        info = {**info, "demo_start": row}
        return obs, info

    def restore(self, row: int, *, restart_clock: bool) -> Any:
        """Restore demonstration row ``row``; returns its observation, checked against the recorded one."""
        from prm_critic.robotics.snapshot import ReplayMismatchError, Snapshot

        d = self.demos
        if not 0 <= row < len(d.t):
            raise ValueError(f"demo_state: expected a demonstration row in [0, {len(d.t)}), got {row!r}")
        self.snap.restore(Snapshot.from_arrays(d.sim[row], str(d.py[row])))
        if restart_clock:
            for w in self.snap._time_limits:
                w._elapsed_steps = 0
        obs = observe_restored(self.env)
        got = d.layout.flatten(obs).astype(np.float32)
        if not np.array_equal(got, d.x[row]):
            raise ReplayMismatchError(
                f"demo_state {row} (episode {int(d.episode[row])}, step {int(d.t[row])} of {str(d.folder)!r}): the "
                f"restored observation differs from the recorded one (max |diff| "
                f"{float(np.max(np.abs(got - d.x[row]))):.3g}); the demonstrations were not recorded from this env")
        return obs
