"""Online critic refresh: fine-tune a learned critic on the policy's own recent episodes.

Every ``refresh_freq`` env steps, :class:`CriticRefreshCallback` takes the last ``window`` finished
episodes of the training envs (critic inputs ``x_0 .. x_T`` from the shaper's ``info["prm_x"]`` /
``info["prm_next_x"]``, the episode's success from :class:`~prm_critic.sb3.monitor.PRMMonitor`)
and runs ``n_updates`` Adam steps on::

    target_t = success(episode) * label_gamma ** (T - t)        (outcome label, discounted)
    loss     = BCE_with_logits(logit_head(x_t), target_t)        (mean over a batch of steps)

on the critic's ``head`` (``"success"`` by default). With ``positives`` (critic inputs of demonstration
states, labelled 1 at every refresh) and ``balanced=True``, each batch draws half its steps from
labels >= 0.5 and half from labels below, the DrS recipe for a success classifier (``success_contrast``)
that the learner's own episodes keep up to date. The critic object is the one the shaper and
the pruner hold (``train_policy`` shares one instance across vector envs), so the refreshed
weights take effect at once. Caveat: a potential that changes during training is no longer a
fixed potential, so Ng et al.'s policy-invariance guarantee only holds between refreshes.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prm_critic import validate
from prm_critic._optional import require

require("stable_baselines3.common.callbacks")  # a missing extra fails here with the exact ``pip install`` to run
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

if TYPE_CHECKING:
    import torch

__all__ = ["CriticRefreshCallback"]


class CriticRefreshCallback(BaseCallback):
    """Periodically fine-tune a :class:`~prm_critic.models.TorchStateCritic` on outcome labels.

    Args:
        critic: the learned critic used by the shaper / pruner (a ``TorchStateCritic``).
        head: head trained: ``"success"`` or ``"progress"``.
        refresh_freq: env steps between refreshes (> 0).
        window: number of most recent finished episodes used (> 0).
        n_updates: Adam steps per refresh (> 0).
        batch_size: steps per Adam step (> 0).
        lr: Adam learning rate (> 0).
        label_gamma: discount of the outcome label towards earlier steps, in (0, 1].
        min_episodes: skip a refresh until this many episodes are collected (> 0).
        save_path: if set, the critic checkpoint is rewritten (atomically) after each refresh.
        seed: seeds batch sampling.
        positives: ``None`` or ``(N, D)`` critic inputs labelled 1 at every refresh (demonstration states
            seeding the success side).
        balanced: draw half of each batch from labels >= 0.5 and half from labels below (when both exist).
    """

    def __init__(self, critic, *, head: str = "success", refresh_freq: int = 5_000, window: int = 200,
                 n_updates: int = 50, batch_size: int = 256, lr: float = 1e-4, label_gamma: float = 1.0,
                 min_episodes: int = 10, save_path: str | os.PathLike | None = None, seed: int = 0, verbose: int = 0,
                 positives=None, balanced: bool = False):
        super().__init__(verbose)
        from prm_critic.models import TorchStateCritic

        if not isinstance(critic, TorchStateCritic):
            raise TypeError(f"critic: expected a TorchStateCritic (a learned critic with a torch net), got "
                            f"{type(critic).__name__}")
        if head not in ("progress", "success"):
            raise ValueError(f"head: expected 'progress' or 'success', got {head!r}")
        for name, v in (("refresh_freq", refresh_freq), ("window", window), ("n_updates", n_updates),
                        ("batch_size", batch_size), ("min_episodes", min_episodes)):
            validate.positive_int(name, v)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"lr: expected a number > 0, got {lr!r}")
        validate.check_gamma("label_gamma", label_gamma)
        if positives is not None:
            positives = np.asarray(positives, dtype=np.float32)
            if positives.ndim != 2 or positives.shape[1] != critic.obs_dim or not len(positives):
                raise ValueError(f"positives: expected critic inputs of shape (N, {critic.obs_dim}) with N >= 1, got "
                                 f"shape {positives.shape}")
            if not np.all(np.isfinite(positives)):
                raise ValueError("positives: expected finite critic inputs, got NaN or inf")
        self.positives = positives
        self.balanced = validate.check_flag("balanced", balanced)
        self.critic = critic
        self.head_index = 0 if head == "progress" else 1
        self.refresh_freq = refresh_freq
        self.n_updates = n_updates
        self.batch_size = batch_size
        self.lr = float(lr)
        self.label_gamma = float(label_gamma)
        self.min_episodes = min_episodes
        self.save_path = Path(save_path) if save_path is not None else None
        self.episodes: deque = deque(maxlen=window)
        self._current: dict[int, list[np.ndarray]] = {}
        self._rng = np.random.default_rng(seed)
        self._opt: torch.optim.Optimizer | None = None  # built on the first refresh
        self._next = refresh_freq
        #: one dict per refresh: env_steps, loss_before, loss_after, n_steps, positive_frac
        self.history: list[dict] = []

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", [])
        for i, info in enumerate(infos):
            if "prm_next_x" not in info:
                raise ValueError("infos: CriticRefreshCallback needs PRMRewardShaper's info['prm_next_x'] "
                                 "(train with shaping and this critic), got an info without it")
            xs = self._current.setdefault(i, [])
            if not xs:
                xs.append(np.asarray(info["prm_x"], np.float32).reshape(-1))
            xs.append(np.asarray(info["prm_next_x"], np.float32).reshape(-1))
            ep = info.get("episode")
            if ep is not None:
                self.episodes.append((np.stack(xs), bool(ep.get("success", False))))
                self._current[i] = []
        if self.num_timesteps >= self._next:
            self._next = (self.num_timesteps // self.refresh_freq + 1) * self.refresh_freq
            if len(self.episodes) >= self.min_episodes:
                self.refresh()
        return True

    def add_episode(self, x, success: bool) -> None:
        """Add one finished episode by hand (critic inputs ``x_0 .. x_T``, ``(T + 1, D)``, and its
        outcome): with :meth:`refresh`, the callback also works outside ``model.learn`` (e.g. on
        episodes collected with ``prm-critic collect --policy policy.json``)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != self.critic.obs_dim:
            raise ValueError(f"x: expected shape (T + 1, {self.critic.obs_dim}) with T + 1 >= 1, got {x.shape}")
        self.episodes.append((x, bool(success)))

    def _dataset(self) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for x, ok in self.episodes:
            T = len(x) - 1
            xs.append(x)
            ys.append(float(ok) * self.label_gamma ** (T - np.arange(T + 1, dtype=np.float64)))
        if self.positives is not None:
            xs.append(self.positives)
            ys.append(np.ones(len(self.positives)))
        return np.concatenate(xs), np.concatenate(ys).astype(np.float32)

    def refresh(self) -> dict:
        """Run one refresh now on the collected episodes; returns its history row."""
        torch = require("torch")
        F = torch.nn.functional
        net = self.critic.net
        if self._opt is None:
            self._opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        if not self.episodes:
            raise ValueError("episodes: no finished episode to refresh on (collect some, or add_episode())")
        x, y = self._dataset()
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)

        def loss_on(idx):
            return F.binary_cross_entropy_with_logits(net.logits(xt[idx])[:, self.head_index], yt[idx])

        all_idx = np.arange(len(x))
        with torch.no_grad():
            before = float(loss_on(all_idx))
        net.train()
        pos, neg = np.flatnonzero(y >= 0.5), np.flatnonzero(y < 0.5)
        split = self.balanced and len(pos) and len(neg)
        for _ in range(self.n_updates):
            if split:
                half = max(1, min(self.batch_size, len(x)) // 2)
                idx = np.concatenate([self._rng.choice(pos, half), self._rng.choice(neg, half)])
            else:
                idx = self._rng.integers(0, len(x), size=min(self.batch_size, len(x)))
            loss = loss_on(idx)
            self._opt.zero_grad()
            loss.backward()
            self._opt.step()
        net.eval()
        with torch.no_grad():
            after = float(loss_on(all_idx))
        row = {"env_steps": self.num_timesteps, "loss_before": before, "loss_after": after, "n_steps": len(x),
               "positive_frac": float(np.mean(y > 0))}
        self.history.append(row)
        if getattr(self, "model", None) is not None:  # inside model.learn (standalone use has no logger)
            self.logger.record("prm/refresh_loss", after)
            self.logger.record("prm/refresh_count", len(self.history))
        if self.save_path is not None:
            from prm_critic.models import save_state_critic

            save_state_critic(self.save_path, net, {**self.critic.meta, "refreshed_at_env_steps": self.num_timesteps})
        return row
