"""Checkpoints: ``<name>.safetensors`` (weights + normalisation buffers) + ``<name>.json`` (config
and metadata). No pickle anywhere.

A checkpoint path may name the ``.safetensors`` file, the ``.json`` file, or the common stem.

Integrity: the JSON records ``weights_sha256``, the SHA-256 of the ``.safetensors`` file's bytes, and
:func:`load_state_critic` checks it before reading the weights, so one changed byte in the weights
file is an error naming the file, never a critic with different scores. A checkpoint written by an
older version (no hash) is refused unless ``allow_unverified=True``.

The JSON also records ``config_sha256``, the SHA-256 of the JSON itself (everything but that field:
the ``net`` architecture, the metadata with the critic's input layout, the weights hash), so an
edited ``net.activation`` or layout is an error too. The normaliser and the heads are tensors of the
weights file. A checkpoint of ``format_version`` 2 (weights hash only) loads with an
:class:`~prm_critic.integrity.UnverifiedConfigWarning` (none with ``allow_unverified=True``); saving
it again seals it.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

try:
    from safetensors import SafetensorError

    _SafetensorsError: type[Exception] = SafetensorError
except ImportError:  # pragma: no cover - older safetensors
    _SafetensorsError = Exception
from safetensors.torch import load
from safetensors.torch import save as save_bytes

from prm_critic import __version__, validate
from prm_critic._io import atomic_write_bytes, checkpoint_paths
from prm_critic.integrity import (
    CheckpointError,
    UnverifiedConfigWarning,
    check_config_sha256,
    check_sha256,
    config_sha256,
    read_format_doc,
    sha256_bytes,
)
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic

__all__ = ["CheckpointError", "save_state_critic", "load_state_critic", "checkpoint_paths", "atomic_write_bytes",
           "sha256_bytes", "check_sha256", "weights_sha256"]

FORMAT = "prm-critic/state-critic"
#: 3: the JSON records ``config_sha256`` over itself; 2: ``weights_sha256`` only; 1: no hash
FORMAT_VERSION = 3
#: the JSON field holding the hash of the JSON itself
CONFIG_HASH = "config_sha256"




def _weights_bytes(net: StateCriticNet) -> bytes:
    """The bytes of the ``.safetensors`` file :func:`save_state_critic` writes for ``net``."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}
    return save_bytes(tensors, metadata={"format": FORMAT})


def weights_sha256(net: StateCriticNet) -> str:
    """The ``weights_sha256`` a checkpoint of ``net`` records: the SHA-256 of the weights file
    :func:`save_state_critic` writes (the same bytes for the same weights), so a loaded critic's
    hash equals the one in its JSON."""
    return sha256_bytes(_weights_bytes(net))


def save_state_critic(path: str | os.PathLike, net: StateCriticNet, meta: dict[str, Any] | None = None) -> Path:
    """Save ``net`` and ``meta`` (JSON-serialisable) as a checkpoint; returns the weights path."""
    w, j = checkpoint_paths(path)
    data = _weights_bytes(net)
    atomic_write_bytes(w, data)
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "prm_critic_version": __version__,
           "weights_sha256": sha256_bytes(data), "net": net.config(), "meta": meta or {}}
    doc = json.loads(json.dumps(doc))  # the hash covers what a reader will parse (tuples are lists there)
    doc[CONFIG_HASH] = config_sha256(doc, CONFIG_HASH)
    atomic_write_bytes(j, json.dumps(doc, indent=2, sort_keys=True).encode())
    return w


def _refuse_ensemble_file(j: Path) -> None:
    """Refuse a critic-ensemble file where one state-critic checkpoint is needed, naming its members."""
    from prm_critic.models.ensemble import ENSEMBLE_FORMAT

    try:
        doc = json.loads(j.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not JSON: the checks below name the problem
    if not (isinstance(doc, dict) and doc.get("format") == ENSEMBLE_FORMAT):
        return
    members = [m.get("path") for m in doc.get("members", []) if isinstance(m, dict)]
    raise CheckpointError(
        f"checkpoint: {str(j)!r} is a critic ensemble (written by prm-critic ensemble, {len(members)} members), not one "
        f"state-critic checkpoint; where one critic is needed (distill --critic, export --checkpoint) give one of its "
        f"members ({', '.join(map(repr, members[:4]))}{', ...' if len(members) > 4 else ''}, relative to the "
        "ensemble file); load the ensemble itself with prm_critic.models.load_critic_ensemble (train-policy "
        "--critic takes it)")


def load_state_critic(path: str | os.PathLike, *, allow_unverified: bool = False) -> TorchStateCritic:
    """Load a checkpoint written by :func:`save_state_critic`.

    The JSON is checked against its ``config_sha256`` and the weights file's SHA-256 against
    ``weights_sha256`` before the net is built. ``allow_unverified=True`` accepts a checkpoint without
    hashes (written by an older version); a hash that does not match is refused regardless. A
    ``format_version`` 2 checkpoint (weights hash only) loads with an :class:`UnverifiedConfigWarning`
    unless ``allow_unverified=True``.

    Raises:
        FileNotFoundError: a file of the pair is missing (the message names it).
        CheckpointError: the JSON or the weights are corrupt (hash mismatch), were written by a newer
            version, have no hash (unless ``allow_unverified``), or belong to something else.
    """
    validate.check_flag("allow_unverified", allow_unverified)
    w, j = checkpoint_paths(path)
    if j.is_file() and not w.is_file():
        _refuse_ensemble_file(j)
    for f in (j, w):
        if not f.is_file():
            raise FileNotFoundError(f"checkpoint: {str(f)!r} does not exist (expected {w.name} + {j.name})")
    doc = read_format_doc(j, fmt=FORMAT, noun="not a prm-critic state critic", newest=FORMAT_VERSION)
    version = doc["format_version"]
    if version >= 3:
        check_config_sha256(doc, path=j, field=CONFIG_HASH)
    try:
        net = StateCriticNet(**doc["net"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint: {str(j)!r} has an invalid 'net' config: {exc}") from exc
    data = w.read_bytes()
    check_sha256(data, doc.get("weights_sha256"), file=w, doc=j, field="weights_sha256", allow_unverified=allow_unverified)
    try:
        tensors = load(data)
    except (_SafetensorsError, OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint: {str(w)!r} is corrupt or not a safetensors file ({exc})") from exc
    try:
        net.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint: weights in {str(w)!r} do not match the config in {j.name}: {exc}") from exc
    if version < 3 and not allow_unverified:
        warnings.warn(
            f"checkpoint: {str(j)!r} (format_version {version}) records no {CONFIG_HASH!r}: its 'net' config and "
            f"'meta' are not checked (an edited activation or layout would change the scores unnoticed); load it "
            f"and save it again with save_state_critic to seal it",
            UnverifiedConfigWarning, stacklevel=2,
        )
    return TorchStateCritic(net, doc.get("meta", {}))
