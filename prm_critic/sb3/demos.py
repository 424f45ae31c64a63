"""Demonstrations in an off-policy learner's replay buffer (the "demonstrations without a reward
model" control of a learned potential, and a use of demonstrations of its own).

:func:`add_demos_to_buffer` replays every demonstration, action by action, through an env chain
built like the training env's (the same reward shaper, so shaped rewards and the shaper's HER
relabelling inputs are those the learner would have stored itself), starting from the exact
snapshot of its first state (:class:`~prm_critic.wrappers.demo_starts.DemoStarts`), and adds each
transition to ``model.replay_buffer``. Every replayed next state must equal the recorded one
(exactly, in the recorded float32), and the episode must end where it was recorded: a mismatch is a
:class:`~prm_critic.robotics.snapshot.ReplayMismatchError`, never a buffer of other transitions.
The buffer must hold the learner's whole run beside them (``train_policy`` sizes it so), so that the
demonstrations are never overwritten.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["add_demos_to_buffer"]


def add_demos_to_buffer(model, demos, make_env: Callable[[], Any]) -> int:
    """Add every demonstration of ``demos`` to ``model.replay_buffer``; returns the transitions added.

    Args:
        model: an off-policy SB3 / SBX model on a VecEnv with one env.
        demos: :class:`~prm_critic.robotics.demos.Demonstrations` with snapshots.
        make_env: builds one env chain like the training env's with a
            :class:`~prm_critic.wrappers.demo_starts.DemoStarts` innermost (``prob=0``).
    """
    from prm_critic.robotics.snapshot import ReplayMismatchError

    buf = getattr(model, "replay_buffer", None)
    if buf is None:
        raise ValueError(f"demos: {type(model).__name__} has no replay buffer; demonstrations in the buffer need an "
                         "off-policy algorithm (sac, tqc, crossq)")
    if getattr(buf, "n_envs", 1) != 1:
        raise ValueError(f"demos: the replay buffer has {buf.n_envs} envs; demonstrations are added to a one-env buffer "
                         "(n_envs=1)")
    free = buf.buffer_size - (buf.pos if not buf.full else buf.buffer_size)
    if free < len(demos.t):
        raise ValueError(f"demos: {len(demos.t)} demonstration steps do not fit in the replay buffer's {free} free rows")
    env = make_env()
    added = 0
    try:
        for b, e in demos.blocks():
            obs, _ = env.reset(options={"demo_state": b})
            for r in range(b, e):
                action = np.asarray(demos.action[r], dtype=np.float32)
                nxt, reward, terminated, truncated, info = env.step(action)
                got = demos.layout.flatten(nxt).astype(np.float32)
                last = r == e - 1
                where = f"demonstration episode {int(demos.episode[r])}, step {int(demos.t[r])} of {str(demos.folder)!r}"
                if not np.array_equal(got, demos.next_x[r]):
                    raise ReplayMismatchError(f"{where}: replaying the recorded action does not reproduce the recorded "
                                              f"next state (max |diff| {float(np.max(np.abs(got - demos.next_x[r]))):.3g})")
                done = bool(terminated or truncated)
                if done != last:
                    raise ReplayMismatchError(f"{where}: the replayed episode {'ends' if done else 'goes on'} where the "
                                              f"recorded one {'goes on' if done else 'ends'}")
                info = {**info, "TimeLimit.truncated": bool(truncated and not terminated)}
                scaled = model.policy.scale_action(action[None]) if hasattr(model.policy, "scale_action") else action[None]
                buf.add(_batch(obs), _batch(nxt), scaled, np.asarray([reward], dtype=np.float32),
                        np.asarray([done]), [info])
                obs = nxt
                added += 1
    finally:
        env.close()
    return added


def _batch(obs):
    if isinstance(obs, dict):
        return {k: np.asarray(v)[None] for k, v in obs.items()}
    return np.asarray(obs)[None]
