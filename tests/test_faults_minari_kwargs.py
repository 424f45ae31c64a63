"""Minari import compares the make kwargs recorded in the dataset with the spec's env.

Real PointMaze data collected with a user spec (another ``maze_map``, or ``continuing_task=True``),
exported to a real Minari dataset (HDF5 storage), imported against the built-in spec and the user spec.
"""

import copy

import pytest

minari = pytest.importorskip("minari")
pytest.importorskip("h5py", reason='Minari\'s HDF5 storage needs h5py: pip install "prm-critic[minari]"')

from faults import correct, loud  # noqa: E402
from prm_critic.robotics.collection import collect, load_shard  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402
from prm_critic.robotics.minari import MinariLayoutError, export_minari, import_minari  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402

pytestmark = pytest.mark.fault

MAZE = "PointMaze_UMaze-v3"
MIRRORED = [[1, 1, 1, 1, 1], [1, 0, 0, 0, 1], [1, 0, 1, 1, 1], [1, 0, 0, 0, 1], [1, 1, 1, 1, 1]]


def _user_spec(name, **make_kwargs):
    doc = copy.deepcopy(load_spec(MAZE).to_dict())
    doc["task"]["name"] = name
    doc["task"]["make_kwargs"] = {**doc["task"].get("make_kwargs", {}), **make_kwargs}
    return doc


@pytest.mark.parametrize("name,kwargs,match", [
    ("umaze-mirrored", {"maze_map": MIRRORED},
     r"make kwargs .*'maze_map': dataset \[\[1, 1, 1, 1, 1\], \[1, 0, 0, 0, 1\], \[1, 0, 1, 1, 1\].* spec "
     r"'PointMaze_UMaze-v3' env \[\[1, 1, 1, 1, 1\], \[1, 0, 0, 0, 1\], \[1, 1, 1, 0, 1\]"),
    ("umaze-continuing", {"continuing_task": True},
     r"make kwargs .*'continuing_task': dataset True, spec 'PointMaze_UMaze-v3' env False"),
])
def test_dataset_recorded_with_other_make_kwargs_is_refused(tmp_path, name, kwargs, match):
    spec = _user_spec(name, **kwargs)
    data = tmp_path / "data"
    collect(spec, data, episodes=2, shard_size=2, max_episode_steps=30, seed=0, progress=False)
    export_minari(data, f"prm/{name}-v0", datasets_path=tmp_path / "ds")
    with loud(23, f"Minari {MAZE} dataset recorded with {kwargs}, imported against the built-in spec",
              MinariLayoutError, match=match):
        import_minari(f"prm/{name}-v0", tmp_path / "wrong", spec=MAZE, datasets_path=tmp_path / "ds")
    assert not (tmp_path / "wrong").exists()
    # the spec made for those kwargs imports it, and its subgoal labels are the collected ones
    out = import_minari(f"prm/{name}-v0", tmp_path / "right", spec=spec, datasets_path=tmp_path / "ds")
    label(data, "subgoal", progress=False)
    label(out, "subgoal", progress=False)
    a = load_shard(data / "labels" / "subgoal" / "shard_00000.npz", ("label",))["label"]
    b = load_shard(out / "labels" / "subgoal" / "shard_00000.npz", ("label",))["label"]
    assert (a == b).all()
    correct(23, f"the same dataset imported with a spec whose make_kwargs are {kwargs}",
            "imported; subgoal labels equal those of the collected data")
