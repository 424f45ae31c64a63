"""Ensembles of state critics: the mean of several critics' scores, and its checkpoint file.

Critics trained with one recipe and different seeds disagree where their data is thin (the states a
learning policy visits first); their mean is a smoother potential than any one of them. An
ensemble is a :class:`~prm_critic.critic.StateCritic` like its members, so it goes wherever a critic
goes (reward shaper, pruner, ``train_policy``):

    progress(x) = mean_k progress_k(x),   success(x) = mean_k success_k(x)

The file (``<name>.json``, format ``prm-critic/critic-ensemble``) names the member checkpoints by
path relative to its own folder and records each member's ``weights_sha256`` and ``config_sha256``
(the hash of the member's JSON: its architecture, such as the activation, its input layout and its
weights hash) and the file's own ``config_sha256``: a member retrained, edited, re-saved with another
architecture or swapped after the ensemble was written is refused when it loads, never averaged in
silently. A file of format version 1 (member weights hashed only) loads with an
:class:`~prm_critic.integrity.UnverifiedConfigWarning`; saving the ensemble again seals it.

    save_critic_ensemble("critics/push_ens.json", ["critics/push_cov.json", "critics/push_cov_s1.json"])
    critic = load_critic_ensemble("critics/push_ens.json")
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from prm_critic import __version__
from prm_critic.critic import CriticInfo, StateCritic, StepScores, as_obs_batch
from prm_critic.integrity import (CheckpointError, UnverifiedConfigWarning, check_config_sha256, config_sha256,
                                  read_format_doc)
from prm_critic.models.checkpoint import CONFIG_HASH as MEMBER_CONFIG_HASH
from prm_critic.models.checkpoint import atomic_write_bytes, checkpoint_paths, load_state_critic
from prm_critic.robotics.layout import layout_from

__all__ = ["EnsembleCritic", "save_critic_ensemble", "load_critic_ensemble", "is_critic_ensemble", "ENSEMBLE_FORMAT"]

ENSEMBLE_FORMAT = "prm-critic/critic-ensemble"
#: 2: members' ``config_sha256`` recorded too; 1: members' ``weights_sha256`` only
ENSEMBLE_FORMAT_VERSION = 2
_CONFIG_HASH = "config_sha256"
#: what an ensemble's critic_info must agree on across its members
_INFO_FIELDS = ("task", "env_id", "layout", "spec", "labels")


def _canon(v: Any) -> Any:
    return json.loads(json.dumps(v, sort_keys=True, default=lambda o: o.to_dict() if hasattr(o, "to_dict") else repr(o)))


class EnsembleCritic(StateCritic):
    """The mean of ``members``' scores, head by head (module docstring).

    Args:
        members: two or more state critics of the same input width whose :meth:`critic_info` agree
            on task, env id, input layout, spec and label family (fields a member leaves unset are
            not compared).
        paths: where each member was loaded from (for messages and the fingerprint); optional.

    Raises:
        ValueError: fewer than two members, a member that is not a state critic, widths or
            declarations that differ (naming the member and the field).
    """

    def __init__(self, members: Sequence[StateCritic], *, paths: Sequence[str] | None = None):
        members = list(members)
        if len(members) < 2:
            raise ValueError(f"members: an ensemble needs at least 2 critics, got {len(members)}")
        for i, m in enumerate(members):
            if not isinstance(m, StateCritic):
                raise ValueError(f"members[{i}]: expected a StateCritic, got {type(m).__name__}")
        dims = [m.obs_dim for m in members]
        if len(set(dims)) != 1:
            raise ValueError(f"members: expected critics of one input width, got obs_dim {dims}")
        if paths is not None and len(paths) != len(members):
            raise ValueError(f"paths: expected one per member ({len(members)}), got {len(paths)}")
        infos = [m.critic_info() for m in members]
        for f in _INFO_FIELDS:
            seen = [(i, _canon(getattr(info, f))) for i, info in enumerate(infos) if getattr(info, f) is not None]
            for i, v in seen[1:]:
                if v != seen[0][1]:
                    raise ValueError(f"members[{i}]: declares {f} {v!r}, expected {seen[0][1]!r} as members[{seen[0][0]}] "
                                     "(an ensemble averages critics of one task and input layout)")
        self.members = members
        self.paths = list(paths) if paths is not None else None
        self.obs_dim = int(dims[0])
        first = {f: next((getattr(info, f) for info in infos if getattr(info, f) is not None), None)
                 for f in _INFO_FIELDS}
        self._info = CriticInfo(**first)

    def critic_info(self) -> CriticInfo:
        """The members' common declaration (task, env id, layout, spec, label family)."""
        return self._info

    def input_layout(self) -> Any:
        """The members' common layout as a ``CriticInputLayout`` (``None`` without one)."""
        return layout_from(self._info.layout)

    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)`` (or the env's own observations, dicts, flattened
        with :meth:`input_layout`): the members' mean per head, float32 ``(B,)``."""
        x = as_obs_batch(steps, self.obs_dim, name="steps", flatten=self._flatten_obs)
        scores = [m.score(x) for m in self.members]
        progress = np.stack([s.progress for s in scores]).mean(axis=0, dtype=np.float64)
        success = np.stack([s.success for s in scores]).mean(axis=0, dtype=np.float64)
        return StepScores(np.asarray(progress), np.asarray(success))

    def __repr__(self) -> str:
        names = self.paths or [type(m).__name__ for m in self.members]
        return f"EnsembleCritic({names})"


def is_critic_ensemble(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an ensemble file (a JSON whose ``format`` is :data:`ENSEMBLE_FORMAT`)."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        doc = json.loads(p.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("format") == ENSEMBLE_FORMAT


def save_critic_ensemble(path: str | os.PathLike, members: Sequence[str | os.PathLike]) -> Path:
    """Write an ensemble file at ``path`` (``.json``) naming the checkpoints ``members`` (each loaded
    and checked here: same task and layout); returns the path. Member paths are stored relative to
    the ensemble file's folder, so the folder can move as a whole."""
    out = Path(path)
    if out.suffix != ".json":
        raise ValueError(f"path: expected an ensemble file name ending in .json, got {str(path)!r}")
    critics, rows = [], []
    for m in members:
        w, j = checkpoint_paths(m)
        critic = load_state_critic(j)
        critics.append(critic)
        rel = os.path.relpath(j.resolve(), out.resolve().parent)
        doc = json.loads(j.read_text())
        rows.append({"path": Path(rel).as_posix(), "weights_sha256": doc["weights_sha256"],
                     "config_sha256": config_sha256(doc, MEMBER_CONFIG_HASH)})
    EnsembleCritic(critics, paths=[r["path"] for r in rows])  # refuses members that cannot be averaged
    doc = {"format": ENSEMBLE_FORMAT, "format_version": ENSEMBLE_FORMAT_VERSION, "prm_critic_version": __version__,
           "reduce": "mean", "members": rows}
    doc[_CONFIG_HASH] = config_sha256(doc, _CONFIG_HASH)
    atomic_write_bytes(out, json.dumps(doc, indent=2, sort_keys=True).encode())
    return out


def load_critic_ensemble(path: str | os.PathLike) -> EnsembleCritic:
    """Load an ensemble file written by :func:`save_critic_ensemble`.

    Checks the file's ``config_sha256``, then loads every member (each checks its own hashes) and
    compares its ``weights_sha256`` with the one the ensemble recorded.

    Raises:
        FileNotFoundError: the file or a member is missing (named).
        CheckpointError: not an ensemble file, a newer format, a hash mismatch, or a member that
            changed since the ensemble was written (named, with both hashes).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"ensemble: {str(p)!r} does not exist")
    doc = read_format_doc(p, fmt=ENSEMBLE_FORMAT, noun="not a critic ensemble", prefix="ensemble",
                          newest=ENSEMBLE_FORMAT_VERSION, newer="file")
    version = doc["format_version"]
    check_config_sha256(doc, path=p, field=_CONFIG_HASH)
    if doc.get("reduce") != "mean":
        raise CheckpointError(f"ensemble: {str(p)!r} has reduce {doc.get('reduce')!r}, expected 'mean'")
    rows = doc.get("members")
    if not isinstance(rows, list) or len(rows) < 2:
        raise CheckpointError(f"ensemble: {str(p)!r} needs a list of at least 2 members, got {rows!r}")
    critics, paths = [], []
    for i, row in enumerate(rows):
        if not (isinstance(row, dict) and isinstance(row.get("path"), str) and isinstance(row.get("weights_sha256"), str)):
            raise CheckpointError(f"ensemble: member {i} of {str(p)!r}: expected {{'path': str, 'weights_sha256': str}}, "
                                  f"got {row!r}")
        member = p.parent / row["path"]
        w, j = checkpoint_paths(member)
        if not j.is_file():
            raise FileNotFoundError(f"ensemble: member {i} of {str(p)!r}, {str(j)!r}, does not exist")
        member_doc = json.loads(j.read_text())
        recorded = member_doc.get("weights_sha256")
        if recorded != row["weights_sha256"]:
            raise CheckpointError(f"ensemble: member {i} of {str(p)!r}, {str(j)!r}, has weights_sha256 {recorded!r}, "
                                  f"expected {row['weights_sha256']!r} (the member changed after the ensemble was written)")
        if version >= 2:
            actual = config_sha256(member_doc, MEMBER_CONFIG_HASH) if isinstance(member_doc, dict) else None
            if actual != row.get("config_sha256"):
                raise CheckpointError(
                    f"ensemble: member {i} of {str(p)!r}, {str(j)!r}, has config_sha256 {actual!r}, expected "
                    f"{row.get('config_sha256')!r}: its architecture, layout or metadata changed after the ensemble was "
                    f"written (same weights_sha256), which changes its scores; write the ensemble again to accept it")
        critics.append(load_state_critic(j))
        paths.append(row["path"])
    if version < 2:
        warnings.warn(
            f"ensemble: {str(p)!r} (format_version {version}) records only its members' weights hashes: a member "
            f"re-saved with the same weights but another architecture or layout is not noticed; write the ensemble "
            f"again with save_critic_ensemble to seal it", UnverifiedConfigWarning, stacklevel=2)
    return EnsembleCritic(critics, paths=paths)
