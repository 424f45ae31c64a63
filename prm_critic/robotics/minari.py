"""Trajectories to and from `Minari <https://minari.farama.org>`_ datasets (the offline-RL standard).

``export_minari(collected_dir, dataset_id)`` writes a data set collected by ``prm-critic collect`` as a
Minari dataset; ``import_minari(dataset, out_dir, spec=...)`` turns a Minari dataset into
prm-critic's shard format, ready for ``prm-critic label`` and ``train-critic``.

Mapping of one episode of ``T`` steps (collected critic inputs ``x_t`` are the observation keys of
the spec's ``critic_input``, concatenated in that order)::

    observations[i]  = unflatten(x_i)   for i < T,   observations[T] = unflatten(next_x_{T-1})
    actions[t], rewards[t], terminations[t], truncations[t]  = action, reward, terminated, truncated
    infos[key][i]    = success of observation i (the spec's success info key, or "success");
                       entry 0, the reset, is False: collection records success after each step
    infos["prm_<family>"][i] = the family's label of s_i (float32; NaN where unlabelled and at i = T)

With ``reward="prm_<family>"`` (optionally ``shaping="potential"``, ``gamma``) the ``rewards`` array
holds rewards made from that family's labels instead of the env reward, one per transition, no
NaN (the mapping from the label of step ``t`` to the reward of transition ``t`` is in
:mod:`prm_critic.robotics.label_rewards`); the env reward is kept as
``infos["prm_original_reward"][t + 1]`` (entry 0, the reset, is NaN) and the choice is recorded in
the dataset's metadata under ``"prm_reward"``: the reward, family, shaping, gamma, the labels' SHA-256
(:class:`~prm_critic.robotics.label_rewards.LabelHash`) and the family's parameters
(``labels/<family>.json``). ``reward="env"`` (the default) writes the env reward and nothing else.

The env spec stored in the dataset is gymnasium's spec of the task's env (``env_id``, the spec's
``make_kwargs`` and ``max_episode_steps``), so ``dataset.recover_environment()`` rebuilds it. Tasks
whose prm-critic env is wrapped (``flatten_goals``) or whose ``critic_input`` leaves out observation
keys cannot be written faithfully and are refused.

Import checks the dataset against the spec before anything is written: the env id, every
``critic_input`` key of the observation space and its size, and the action shape must match the
spec's env; a mismatch names both sides. So must the make kwargs recorded in the dataset's env spec
(a PointMaze dataset recorded with another ``maze_map`` or ``continuing_task``): a kwarg one side
leaves unset counts with the env's default; a dataset recorded with other kwargs needs a spec whose
``make_kwargs`` are those. Imported steps have no simulator snapshots
(``py = {"kind": null}``): they get ``subgoal`` and ``outcome`` labels, not ``mc``.

Datasets live in the folder given by ``datasets_path``, else ``MINARI_DATASETS_PATH``, else Minari's
default (``~/.minari/datasets``). Writing needs Minari's HDF5 storage: ``pip install "prm-critic[minari]"``.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.robotics.collection import (
    ShardError, _maze_dict, atomic_savez, atomic_write_json, load_shard, read_meta, shard_files, step_success,
)
from prm_critic.robotics.label_rewards import ORIGINAL_REWARD_KEY, LabelHash, check_reward, episode_rewards
from prm_critic.robotics.make import CriticInputLayout, make_env
from prm_critic.robotics.spec import TaskSpec, load_spec

__all__ = ["export_minari", "import_minari", "MinariLayoutError", "REWARD_METADATA_KEY"]

#: the dataset metadata key recording a ``reward="prm_<family>"`` export's choice (absent for ``"env"``)
REWARD_METADATA_KEY = "prm_reward"

#: ``py`` of an imported step: no simulator snapshot to restore (``mc`` labels are refused).
_NO_SNAPSHOT = json.dumps({"kind": None}, sort_keys=True, separators=(",", ":"))


class MinariLayoutError(ValueError):
    """A Minari dataset (or a collected data set) does not match the task spec's env."""


def _minari():
    return require("minari", "minari")


@contextlib.contextmanager
def _datasets_path(path: "str | os.PathLike | None") -> Iterator[None]:
    """Point Minari at ``path`` (its ``MINARI_DATASETS_PATH``) for the duration of the block."""
    if path is None:
        yield
        return
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(Path(path).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def _success_key(spec: TaskSpec) -> str:
    return spec.success.info_key or "success"


def _space_sizes(space, where: str) -> dict[str, int]:
    """``{key: size}`` of a Dict of Box spaces (``{"obs": size}`` for a Box)."""
    gym = require("gymnasium")
    if isinstance(space, gym.spaces.Dict):
        out = {}
        for k, sp in space.spaces.items():
            if not isinstance(sp, gym.spaces.Box):
                raise MinariLayoutError(f"{where}: observation key {k!r} is a {type(sp).__name__} space; "
                                        "expected Box spaces only")
            out[k] = int(np.prod(sp.shape))
        return out
    if isinstance(space, gym.spaces.Box):
        return {"obs": int(np.prod(space.shape))}
    raise MinariLayoutError(f"{where}: observation space {space} is neither a Dict of Box spaces nor a Box")


def _episode_rows(files: list[Path]) -> Iterator[dict[str, Any]]:
    """One dict per episode, in episode order, from the trajectory shards: its per-step arrays, its index
    and seed, its rows in the shard, the shard file and the shard's number of rows."""
    for f in files:
        d = load_shard(f)
        for e, n in zip(d["ep_index"].tolist(), d["ep_len"].tolist()):
            rows = np.nonzero(d["episode"] == e)[0]
            if len(rows) != n or not np.array_equal(d["t"][rows], np.arange(n)):
                raise ShardError(f"shard file {str(f)!r}: episode {e} has {len(rows)} rows with t={d['t'][rows][:5]}..., "
                                 f"expected ep_len={n} rows with t = 0..{n - 1}")
            ep: dict[str, Any] = {k: d[k][rows] for k in ("x", "next_x", "action", "reward", "terminated", "truncated",
                                                          "success", "t")}
            ep["ep_index"] = np.int64(e)
            ep["ep_seed"] = np.int64(d["ep_seed"][list(d["ep_index"]).index(e)])
            ep["rows"] = rows
            ep["shard"] = f
            ep["shard_rows"] = len(d["t"])
            yield ep


def export_minari(
    collected_dir: "str | os.PathLike",
    dataset_id: str,
    *,
    datasets_path: "str | os.PathLike | None" = None,
    labels: Sequence[str] = (),
    reward: str = "env",
    shaping: str | None = None,
    gamma: float | None = None,
    algorithm_name: str | None = None,
    author: str | None = None,
    author_email: str | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    data_format: str = "hdf5",
):
    """Write the trajectories of ``collected_dir`` (``prm-critic collect``) as Minari dataset ``dataset_id``.

    Args:
        collected_dir: folder with ``meta.json`` and ``shards/``.
        dataset_id: Minari id, ``(namespace/)name-v<version>``, e.g. ``"prm/pointmaze-umaze-scripted-v0"``.
            An existing dataset of that id is never overwritten (Minari raises).
        datasets_path: folder of the Minari datasets (default: ``MINARI_DATASETS_PATH``, else
            Minari's own default).
        labels: label families of ``collected_dir/labels`` to store as ``infos["prm_<family>"]``.
        reward: what the ``rewards`` array holds: ``"env"`` (the env reward, default) or
            ``"prm_<family>"`` for a registered label family
            (:func:`~prm_critic.robotics.label_rewards.reward_choices`): ``reward_t = label_t``, the
            label of step ``t`` (of the state ``s_t`` the transition starts from).
        shaping: ``None`` (default), or ``"potential"`` with a ``"prm_<family>"`` reward:
            ``reward_t = r_t + gamma * Phi'(s_{t+1}) - Phi(s_t)`` with ``Phi`` the labels, ``Phi' = 0``
            on a true termination and, on the last transition of a truncated episode (``s_T`` has
            no label), ``Phi'(s_T) = label_{T-1}`` (:mod:`prm_critic.robotics.label_rewards`).
        gamma: the discount of ``shaping="potential"``, in (0, 1] (required there, refused otherwise):
            the offline learner's discount.
        algorithm_name, author, author_email, code_permalink, description: Minari metadata (the
            collecting policy and the task are used when not given).
        data_format: Minari storage format (``"hdf5"``, the default, needs ``h5py``).

    Returns:
        The :class:`minari.MinariDataset`.

    Raises:
        FileNotFoundError: no collected data, or a requested label family (of ``labels`` or
            ``reward``) is missing.
        ArgumentError: an unknown ``reward`` (the registered choices are named), a bad ``shaping``
            or ``gamma`` (outside (0, 1], missing with shaping, given without it), or a label of the
            ``reward`` family that is not a finite number (NaN, inf, or an unlabelled step).
        MinariLayoutError: the task cannot be written faithfully (wrapped env, ``critic_input``
            leaving out observation keys).
        ShardError: a corrupt shard or meta file, or a label file whose rows differ from its shard's.
    """
    family, shaping, gamma = check_reward(reward, shaping, gamma)
    minari = _minari()
    if data_format == "hdf5":
        require("h5py", "minari")
    src = Path(collected_dir)
    meta, spec, layout, files, labels = _checked_export(src, dataset_id, labels, family)
    obs_space, act_space, env_spec = _export_spaces(src, spec, layout)
    plan = None if family is None else _RewardPlan(reward, family, shaping, gamma, _label_params(src, family))
    buffers = _episode_buffers(src, files, layout, labels, spec, obs_space, act_space, plan)
    with _datasets_path(datasets_path):
        ds = minari.create_dataset_from_buffers(
            dataset_id, buffers, env=env_spec, eval_env=env_spec,
            algorithm_name=algorithm_name or f"prm-critic collect (policy {meta.get('policy')!r})",
            author=author or "prm-critic", author_email=author_email or "unknown",
            code_permalink=code_permalink or "https://pypi.org/project/prm-critic/",
            description=description or (f"{spec.name}: {len(buffers)} episodes collected with prm-critic "
                                        f"(policy {meta.get('policy')!r}, seed {meta.get('seed')})"),
            data_format=data_format,
        )
        if plan is not None:
            try:
                ds.storage.update_metadata({REWARD_METADATA_KEY: plan.record()})
            except BaseException:  # a dataset whose rewards are not described is not left behind
                minari.delete_dataset(dataset_id)
                raise
        return ds


def _checked_export(src: Path, dataset_id: Any, labels: Sequence[str], reward_family: str | None = None
                    ) -> tuple[dict[str, Any], TaskSpec, CriticInputLayout, list[Path], list[str]]:
    """:func:`export_minari`'s checks of its id, collected data and label families (those of ``labels``
    and the ``reward_family``): the data's meta, spec, layout, shard files and ``labels`` as a list."""
    from prm_critic.robotics.dataset import _check_meta
    from prm_critic.robotics.families import label_families

    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise ValueError(f"dataset_id: expected a Minari id such as 'prm/pointmaze-umaze-v0', got {dataset_id!r}")
    meta = read_meta(src)
    spec, layout = _check_meta(meta, src / "meta.json")
    files = shard_files(src, name="collected_dir")
    labels = list(labels)
    for fam in labels:
        if fam not in label_families():
            raise ValueError(f"labels: expected families from {list(label_families())}, got {fam!r}")
    wanted = [("labels", fam) for fam in labels] + ([("reward", reward_family)] if reward_family else [])
    for arg, fam in wanted:
        missing = [f.name for f in files if not (src / "labels" / fam / f.name).is_file()]
        if missing:
            raise FileNotFoundError(f"{arg}: family {fam!r} has no label shards {missing} in "
                                    f"{str(src / 'labels' / fam)!r} (run `prm-critic label --data {src} --family {fam}`)")
    if reward_family and not (src / "labels" / f"{reward_family}.json").is_file():
        raise FileNotFoundError(f"reward: family {reward_family!r} has no parameter file "
                                f"{str(src / 'labels' / (reward_family + '.json'))!r}, which the dataset's metadata "
                                f"records (run `prm-critic label --data {src} --family {reward_family}`)")
    if spec.flatten_goals:
        raise MinariLayoutError(f"task {spec.name!r}: its prm-critic env flattens the goals (flatten_goals), so its "
                                f"observations are not those of gymnasium's {spec.env_id!r}, which Minari recreates; "
                                "expected a task without flatten_goals")
    return meta, spec, layout, files, labels


def _export_spaces(src: Path, spec: TaskSpec, layout: CriticInputLayout):
    """The observation space, action space and gymnasium spec of ``spec``'s env, refused unless the
    critic input holds every observation key (the observations are rebuilt from it)."""
    env = make_env(spec)
    try:
        obs_space, act_space, env_spec = env.observation_space, env.action_space, env.spec
    finally:
        env.close()
    sizes = _space_sizes(obs_space, f"env {spec.env_id!r}")
    if set(sizes) != set(layout.keys) or any(sizes[k] != layout.sizes[k] for k in layout.keys):
        raise MinariLayoutError(
            f"collected_dir {str(src)!r}: the critic input {layout.sizes} (spec critic_input) must hold every "
            f"observation key of env {spec.env_id!r} {sizes} to rebuild its observations; expected the same keys "
            "and sizes")
    return obs_space, act_space, env_spec


def _label_params(src: Path, family: str) -> dict[str, Any]:
    """The parameters ``labels/<family>.json`` records (checked to exist by :func:`_checked_export`)."""
    f = src / "labels" / f"{family}.json"
    try:
        params = json.loads(f.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(f"label parameter file {str(f)!r} is not valid JSON ({exc}); relabel with "
                         f"`prm-critic label --data {src} --family {family}`") from exc
    if not isinstance(params, dict):
        raise ShardError(f"label parameter file {str(f)!r}: expected a JSON object, got {type(params).__name__}")
    return params


class _RewardPlan:
    """The rewards of a ``reward="prm_<family>"`` export: the checked choice and the hash of the labels used."""

    def __init__(self, reward: str, family: str, shaping: str | None, gamma: float | None, params: dict[str, Any]):
        self.reward, self.family, self.shaping, self.gamma, self.params = reward, family, shaping, gamma, params
        self.hash = LabelHash()
        self.held = 0  # truncated episodes whose last shaping term holds Phi(s_T) at label_{T-1}

    def rewards(self, labels: np.ndarray, mask: np.ndarray, ep: dict[str, Any]) -> np.ndarray:
        """The rewards of episode ``ep`` from its rows' ``labels`` and ``mask``; a label that is not a
        finite number is refused, naming the family, episode, step and value."""
        bad = np.flatnonzero(~mask | ~np.isfinite(labels))
        if len(bad):
            i = int(bad[0])
            where = (f"label family {self.family!r}, episode {int(ep['ep_index'])} step t={int(ep['t'][i])} "
                     f"(label file {str(ep['label_file'])!r}; {len(bad)} of {len(labels)} steps of the episode)")
            if not mask[i]:
                raise validate.ArgumentError(
                    f"reward: {where} is unlabelled (mask False); expected a finite label at every step for "
                    f"reward={self.reward!r} (a family labelled with stride > 1 leaves steps unlabelled: relabel "
                    f"with --stride 1, or use a family that labels every step)")
            raise validate.ArgumentError(f"reward: {where} has label {float(labels[i])!r}; expected a finite number "
                                         f"for reward={self.reward!r}")
        self.hash.update(labels)
        term = ep["terminated"].astype(bool)
        if self.shaping is not None and not term[-1]:
            self.held += 1
        return episode_rewards(labels, ep["reward"], term, shaping=self.shaping, gamma=self.gamma)

    def record(self) -> dict[str, Any]:
        """What the dataset's metadata records under :data:`REWARD_METADATA_KEY`."""
        rec: dict[str, Any] = {"reward": self.reward, "family": self.family, "shaping": self.shaping,
                               "gamma": self.gamma, "labels_sha256": self.hash.hexdigest(),
                               "label_params": self.params,
                               "original_reward_info": ORIGINAL_REWARD_KEY}
        if self.shaping is not None:
            rec["truncated_final_potential"] = "label of the last step (s_T has no label)"
            rec["truncated_episodes"] = self.held
        return rec


def _episode_buffers(src: Path, files: list[Path], layout: CriticInputLayout, labels: list[str], spec: TaskSpec,
                     obs_space, act_space, plan: _RewardPlan | None = None) -> list:
    """One Minari ``EpisodeBuffer`` per collected episode of ``files`` (see the module's mapping); with
    a ``plan`` the rewards are its label rewards and the env reward goes to the infos."""
    gym = require("gymnasium")
    succ_key = _success_key(spec)
    EpisodeBuffer = require("minari.data_collector").EpisodeBuffer
    label_cache: dict[tuple[str, str], dict[str, np.ndarray]] = {}

    def label_rows(fam: str, ep: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The ``(label, mask)`` rows of episode ``ep`` in family ``fam``'s label file of its shard."""
        f = src / "labels" / fam / ep["shard"].name
        key = (fam, ep["shard"].name)
        if key not in label_cache:
            if any(k[1] != key[1] for k in label_cache):
                label_cache.clear()  # one shard at a time: the episodes come shard by shard
            lab = load_shard(f, ("label", "mask"))
            if len(lab["label"]) != ep["shard_rows"] or len(lab["mask"]) != ep["shard_rows"]:
                raise ShardError(f"label file {str(f)!r} has {len(lab['label'])} rows, its data shard "
                                 f"{str(ep['shard'])!r} has {ep['shard_rows']}; relabel with `prm-critic label "
                                 f"--data {src} --family {fam}`")
            label_cache[key] = lab
        lab = label_cache[key]
        ep["label_file"] = f
        return lab["label"][ep["rows"]], lab["mask"][ep["rows"]].astype(bool)

    def cast_obs(o):
        if isinstance(obs_space, gym.spaces.Dict):
            return {k: np.asarray(v, dtype=obs_space.spaces[k].dtype).reshape((-1,) + obs_space.spaces[k].shape)
                    for k, v in o.items()}
        return np.asarray(o, dtype=obs_space.dtype).reshape((-1,) + obs_space.shape)

    buffers: list[Any] = []  # minari EpisodeBuffer objects
    for ep in _episode_rows(files):
        T = len(ep["t"])
        states = np.concatenate([ep["x"], ep["next_x"][-1:]], axis=0)  # (T+1, D)
        obs = cast_obs(states if layout.keys == ("obs",) else {k: states[:, layout.slices[k]] for k in layout.keys})
        infos: dict[str, np.ndarray] = {succ_key: np.concatenate([[False], ep["success"].astype(bool)])}
        for fam in labels:
            lab, mask = label_rows(fam, ep)
            v = np.where(mask, lab, np.nan).astype(np.float32)
            infos[f"prm_{fam}"] = np.concatenate([v, [np.nan]]).astype(np.float32)
        rewards = np.asarray(ep["reward"], dtype=np.float64)
        if plan is not None:
            rewards = plan.rewards(*label_rows(plan.family, ep), ep)
            infos[ORIGINAL_REWARD_KEY] = np.concatenate([[np.nan], np.asarray(ep["reward"], dtype=np.float64)])
        buffers.append(EpisodeBuffer(
            id=len(buffers), seed=int(ep["ep_seed"]), observations=obs,
            actions=np.asarray(ep["action"], dtype=act_space.dtype).reshape((T,) + act_space.shape),
            rewards=list(rewards), terminations=list(ep["terminated"].astype(bool)),
            truncations=list(ep["truncated"].astype(bool)), infos=infos))
    return buffers


def _load(dataset: Any, datasets_path):
    """A MinariDataset from a dataset object, an id, or the path of a dataset folder."""
    minari = _minari()
    if isinstance(dataset, minari.MinariDataset):
        return dataset
    p = Path(str(dataset))
    if p.is_dir() and ((p / "data").is_dir() or (p / "metadata.json").is_file()):
        return minari.MinariDataset(p / "data" if (p / "data").is_dir() else p)
    with _datasets_path(datasets_path):
        try:
            return minari.load_dataset(str(dataset))
        except FileNotFoundError as exc:
            where = os.environ.get("MINARI_DATASETS_PATH", "Minari's default folder")
            raise FileNotFoundError(f"dataset: no Minari dataset {str(dataset)!r} in {where} and no dataset folder "
                                    f"of that path ({exc})") from exc


def import_minari(
    dataset: Any,
    out_dir: "str | os.PathLike",
    *,
    spec: "str | TaskSpec",
    datasets_path: "str | os.PathLike | None" = None,
    shard_size: int = 10,
) -> Path:
    """Write the episodes of a Minari dataset into ``out_dir`` in prm-critic's shard format.

    Args:
        dataset: a Minari id (looked up under ``datasets_path``), a dataset folder, or a
            :class:`minari.MinariDataset`.
        out_dir: output folder (``meta.json`` + ``shards/``); must not hold data already.
        spec: the task spec of the dataset's env (name, TOML path or :class:`TaskSpec`).
        datasets_path: folder of the Minari datasets (default: ``MINARI_DATASETS_PATH``).
        shard_size: episodes per shard file.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        MinariLayoutError: the dataset's env id, observation keys/sizes or action shape differ from
            the spec's env (both are named), or its infos lack the spec's success key.
    """
    spec = load_spec(spec)
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"shard_size: expected an integer >= 1, got {shard_size!r}")
    ds = _load(dataset, datasets_path)
    out = Path(out_dir)
    if (out / "meta.json").exists() or any((out / "shards").glob("shard_*.npz")):
        raise ValueError(f"out_dir: {str(out)!r} already holds data; expected a new folder")
    layout, maze, ds_id, ds_env = _check_dataset(ds, spec)
    evaluator = None
    if spec.success.reads_state:
        from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

        evaluator = SubgoalEvaluator(spec, layout, MazeGeometry.from_dict(maze) if maze else None)
    key = spec.success.info_key

    meta = {"format": 1, "task": spec.name, "spec": spec.to_dict(), "layout": layout.to_dict(), "maze": maze,
            "policy": f"minari:{ds_id}", "seed": 0, "shard_size": shard_size, "episodes": int(ds.total_episodes),
            "source": {"minari": str(ds_id), "env_spec": ds_env}}
    out.mkdir(parents=True, exist_ok=True)
    meta["episodes"] = _import_episodes(ds, ds_id, out, spec, layout, key, evaluator, shard_size)
    atomic_write_json(out / "meta.json", meta)
    return out


def _check_dataset(ds: Any, spec: TaskSpec) -> tuple[CriticInputLayout, dict | None, Any, str | None]:
    """Refuse a dataset whose env id, ``critic_input`` observation sizes or action shape differ from
    ``spec``'s env; returns the critic-input layout, the maze geometry, the dataset's id and env id."""
    env = make_env(spec)
    try:
        env.reset(seed=0)
        layout = CriticInputLayout.from_space(spec, env.observation_space)
        maze = _maze_dict(env)
        env_sizes = _space_sizes(env.observation_space, f"spec {spec.name!r} env")
        act_shape = tuple(env.action_space.shape)
        env_id = spec.env_id
        env_kwargs = dict(env.spec.kwargs) if env.spec is not None else dict(spec.make_kwargs)
    finally:
        env.close()
    ds_id = getattr(ds.spec, "dataset_id", None) or getattr(ds, "id", "?")
    ds_env = ds.env_spec.id if ds.env_spec is not None else None
    if ds_env != env_id:
        raise MinariLayoutError(f"dataset {ds_id!r}: env {ds_env!r} does not match spec {spec.name!r} env_id {env_id!r}")
    ds_sizes = _space_sizes(ds.observation_space, f"dataset {ds_id!r}")
    bad = [k for k in layout.keys if ds_sizes.get(k) != env_sizes.get(k)]
    if bad:
        raise MinariLayoutError(f"dataset {ds_id!r}: observation layout {ds_sizes} does not match spec {spec.name!r} "
                                f"(critic_input {list(layout.keys)}, env layout {env_sizes}); keys {bad} differ")
    if tuple(ds.action_space.shape or ()) != act_shape:
        raise MinariLayoutError(f"dataset {ds_id!r}: action shape {ds.action_space.shape} does not match spec "
                                f"{spec.name!r} env action shape {act_shape}")
    _check_make_kwargs(ds_id, dict(ds.env_spec.kwargs or {}), env_kwargs, spec)
    return layout, maze, ds_id, ds_env


#: make kwargs that change how an env renders, not what it does
_RENDER_KWARGS = ("render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config")


def _make_kwargs_defaults(env_id: str) -> dict[str, Any]:
    """The kwargs ``gymnasium.make(env_id)`` uses when none are given: the env's constructor defaults
    updated with the registered kwargs."""
    import inspect

    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    reg = gym.spec(env_id)
    creator = load_env_creator(reg.entry_point) if isinstance(reg.entry_point, str) else reg.entry_point
    params: Iterable[inspect.Parameter] = []
    if creator is not None:  # a spec without an entry point: registered kwargs only
        try:
            params = inspect.signature(creator).parameters.values()
        except (TypeError, ValueError):  # a creator without an inspectable signature: registered kwargs only
            params = []
    defaults = {p.name: p.default for p in params
                if p.default is not inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {**defaults, **dict(reg.kwargs or {})}


def _check_make_kwargs(ds_id: Any, ds_kwargs: dict[str, Any], env_kwargs: dict[str, Any], spec: TaskSpec) -> None:
    """Refuse a dataset whose recorded make kwargs differ from those of ``spec``'s env (both named)."""
    def canon(v: Any) -> str:
        return json.dumps(v, sort_keys=True, default=repr)

    defaults = _make_kwargs_defaults(spec.env_id)
    keys = sorted((set(ds_kwargs) | set(env_kwargs)) - set(_RENDER_KWARGS))
    unset = object()
    diff = []
    for k in keys:
        a, b = ds_kwargs.get(k, defaults.get(k, unset)), env_kwargs.get(k, defaults.get(k, unset))
        if canon(a) != canon(b):
            show = lambda v: "unset" if v is unset else repr(v)  # noqa: E731
            diff.append(f"{k!r}: dataset {show(a)}, spec {spec.name!r} env {show(b)}")
    if diff:
        raise MinariLayoutError(
            f"dataset {ds_id!r}: its env spec's make kwargs differ from spec {spec.name!r} env ({'; '.join(diff)}); "
            f"expected a dataset recorded with the spec's env, or a spec whose make_kwargs are the dataset's")


def _import_episodes(ds: Any, ds_id: Any, out: Path, spec: TaskSpec, layout: CriticInputLayout, key: str | None,
                     evaluator: Any, shard_size: int) -> int:
    """Write the episodes of ``ds`` as shards of ``shard_size`` episodes into ``out``; returns their number.

    ``key``: the info key of the spec's success, else ``None`` and success is ``evaluator``'s."""
    rows: dict[str, list] = {}
    k = 0
    n_eps = 0
    seeds = [m.get("seed") for m in ds.storage.get_episode_metadata(ds.episode_indices)]
    for i, ep in enumerate(ds.iterate_episodes()):
        T = len(ep.rewards)
        states = layout.flatten(ep.observations)  # (T+1, D)
        if states.shape[0] != T + 1:
            raise MinariLayoutError(f"dataset {ds_id!r} episode {ep.id}: {states.shape[0]} observations for {T} steps; "
                                    f"expected {T + 1}")
        if key is not None:
            infos = ep.infos or {}
            if key not in infos:
                raise MinariLayoutError(f"dataset {ds_id!r} episode {ep.id}: infos have no success key {key!r} of spec "
                                        f"{spec.name!r}; infos hold {sorted(infos)}")
            succ = np.asarray(infos[key]).reshape(-1)[-T:].astype(bool)
        else:
            terms, truncs = np.asarray(ep.terminations, dtype=bool), np.asarray(ep.truncations, dtype=bool)
            succ = np.asarray([step_success(spec, {}, nx, evaluator, terminated=bool(te), truncated=bool(tr))
                               for nx, te, tr in zip(states[1:], terms, truncs)], dtype=bool)
        x, nx = states[:-1], states[1:]
        ep_ok = bool(succ[-1]) if spec.success.rule == "final" else bool(succ.any())
        for name, v in (("x", x), ("next_x", nx),
                        ("action", np.asarray(ep.actions, dtype=np.float32).reshape(T, -1)),
                        ("reward", np.asarray(ep.rewards)), ("terminated", np.asarray(ep.terminations)),
                        ("truncated", np.asarray(ep.truncations)), ("success", succ),
                        ("episode", np.full(T, n_eps)), ("t", np.arange(T))):
            rows.setdefault(name, []).append(v)
        seed = seeds[i] if i < len(seeds) else None
        for name, value in (("ep_index", n_eps), ("ep_seed", -1 if seed is None else int(seed)), ("ep_len", T),
                            ("ep_success", ep_ok)):
            rows.setdefault(name, []).append(value)
        n_eps += 1
        if n_eps % shard_size == 0:
            _write_rows(out, k, rows)
            rows = {}
            k += 1
    if rows:
        _write_rows(out, k, rows)
    return n_eps


def _write_rows(out: Path, k: int, rows: dict[str, list]) -> None:
    """Shard ``k`` of ``out`` from the per-step and per-episode rows of its episodes, written atomically."""
    cat = {n: np.concatenate(v) if n not in ("ep_index", "ep_seed", "ep_len", "ep_success") else np.asarray(v)
           for n, v in rows.items()}
    from prm_critic.robotics.collection import shard_path

    atomic_savez(shard_path(out, k), x=cat["x"].astype(np.float32), next_x=cat["next_x"].astype(np.float32),
                 action=cat["action"].astype(np.float32), reward=cat["reward"].astype(np.float32),
                 terminated=cat["terminated"].astype(bool), truncated=cat["truncated"].astype(bool),
                 success=cat["success"].astype(bool), episode=cat["episode"].astype(np.int64),
                 t=cat["t"].astype(np.int64), sim=np.zeros((len(cat["t"]), 0), dtype=np.float64),
                 py=np.asarray([_NO_SNAPSHOT] * len(cat["t"]), dtype=np.str_),
                 ep_index=cat["ep_index"].astype(np.int64), ep_seed=cat["ep_seed"].astype(np.int64),
                 ep_len=cat["ep_len"].astype(np.int64), ep_success=cat["ep_success"].astype(bool))
