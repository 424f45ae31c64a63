"""Distillation into a small deploy critic: the student copies the teacher's normaliser and metadata,
learns its outputs, exports to ONNX with the same scores; ``prm-critic distill`` end to end on a tiny
collected data set, its refusals (layout, split, config) each one clear error."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from prm_critic.models import load_state_critic, save_state_critic  # noqa: E402
from prm_critic.models.checkpoint import weights_sha256  # noqa: E402
from prm_critic.models.distill import (  # noqa: E402
    TEACHER_ONLY_META,
    DistillConfig,
    check_data_layout,
    distill_state_critic,
)
from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.validate import ArgumentError  # noqa: E402

LAYOUT = {"keys": ["observation", "achieved_goal", "desired_goal"], "obs_dim": 8,
          "sizes": {"observation": 4, "achieved_goal": 2, "desired_goal": 2}}


def _teacher(tmp_path, hidden=(32, 32)):
    torch.manual_seed(3)
    net = StateCriticNet(8, hidden=hidden).eval()
    rng = np.random.default_rng(0)
    net.set_normalization(rng.normal(0, 2, 8), rng.uniform(0.2, 3.0, 8), obs_clip=7.5)
    from prm_critic.robotics.spec import load_spec

    meta = {"task": "PointMaze_UMaze-v3", "layout": LAYOUT, "spec": load_spec("PointMaze_UMaze-v3").to_dict(),
            "label_family": "mc", "maze": {"maze_map": [[1]]}, "train_config": {"epochs": 3},
            "metrics": {"auroc_success": 0.9}, "data": {"holdout": 0.2, "split_seed": 0, "test_episodes": [1]}}
    save_state_critic(tmp_path / "teacher", net, meta)
    return load_state_critic(tmp_path / "teacher")


def _x(n=600, seed=1):
    return np.random.default_rng(seed).normal(0, 2, (n, 8)).astype(np.float32)


def test_student_copies_normaliser_and_metadata_and_records_its_teacher(tmp_path):
    teacher = _teacher(tmp_path)
    student, history = distill_state_critic(teacher, _x(), config=DistillConfig(hidden=(8, 4), epochs=2))
    net = student.net
    assert net.hidden == (8, 4) and net.obs_dim == 8
    for name in ("obs_mean", "obs_std", "obs_clip"):  # the same buffers, bit for bit
        assert torch.equal(getattr(net, name), getattr(teacher.net, name)), name
    recorded = json.loads((tmp_path / "teacher.json").read_text())["weights_sha256"]
    meta = student.meta
    assert meta["distilled_from"] == recorded == weights_sha256(teacher.net)
    for key in ("task", "layout", "spec", "label_family", "maze"):
        assert meta[key] == teacher.meta[key], key
    assert not set(TEACHER_ONLY_META) - {"distilled_from", "teacher_net", "distill_config"} & set(meta)
    assert meta["teacher_net"] == {"obs_dim": 8, "hidden": [32, 32], "activation": "relu"}
    assert meta["distill_config"] == DistillConfig(hidden=(8, 4), epochs=2).to_dict()
    assert history["weight_bytes"] == 4 * (8 * 8 + 8 + 8 * 4 + 4 + 4 * 2 + 2)
    assert history["n_train_rows"] + history["n_val_rows"] == 600 and len(history["loss"]) == 2
    # saved with the ordinary checkpoint functions, it loads with everything in place
    save_state_critic(tmp_path / "student", net, meta)
    back = load_state_critic(tmp_path / "student.json")
    assert back.meta["distilled_from"] == recorded and back.critic_info().layout == LAYOUT
    x = _x(20, seed=9)
    np.testing.assert_array_equal(back.score(x).success, student.score(x).success)


@pytest.mark.parametrize("loss", ["bce", "mse"])
def test_student_learns_the_teacher_and_is_deterministic(tmp_path, loss):
    teacher = _teacher(tmp_path)
    x, fresh = _x(3000), _x(1000, seed=7)
    cfg = DistillConfig(hidden=(32, 32), epochs=25, loss=loss, noise=0.05)
    student, history = distill_state_critic(teacher, x, config=cfg)
    untrained, _ = distill_state_critic(teacher, x, config=DistillConfig(hidden=(32, 32), epochs=1, lr=1e-9))

    def gap(c):
        a, b = c.score(fresh), teacher.score(fresh)
        return float(np.mean(np.abs(a.progress - b.progress)) + np.mean(np.abs(a.success - b.success)))

    assert gap(student) < 0.35 * gap(untrained)
    assert history["best_epoch"] is not None and history["val_mae"] < 0.1
    again, _ = distill_state_critic(teacher, x, config=cfg)
    for k, v in student.net.state_dict().items():
        assert torch.equal(v, again.net.state_dict()[k]), k


def test_student_onnx_scores_equal_its_torch_scores(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from prm_critic.onnx import OnnxCritic, export_state_critic

    teacher = _teacher(tmp_path)
    student, _ = distill_state_critic(teacher, _x(), config=DistillConfig(hidden=(16, 8), epochs=3))
    save_state_critic(tmp_path / "student", student.net, student.meta)
    x = np.concatenate([_x(64, seed=5), 40 * _x(8, seed=6)])  # far inputs too: the copied clip is in the graph
    ref = student.score(x)
    dyn = OnnxCritic(export_state_critic(tmp_path / "student.json", tmp_path / "s.onnx"), provider="cpu")
    got = dyn.score(x)
    np.testing.assert_allclose(got.progress, ref.progress, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got.success, ref.success, rtol=1e-4, atol=1e-6)
    one = OnnxCritic(export_state_critic(tmp_path / "student.json", tmp_path / "s.b1.onnx", batch=1), provider="cpu")
    rows = np.asarray([one.score_one(v) for v in x])
    np.testing.assert_allclose(rows, np.stack([ref.progress, ref.success], 1), rtol=1e-4, atol=1e-6)
    info = one.critic_info()
    assert info.layout.to_dict() == LAYOUT and info.task == "PointMaze_UMaze-v3" and info.labels == "mc"


# --------------------------------------------------------------------------- config and argument errors

BAD = [
    ("hidden", (), "hidden: expected a non-empty list"),
    ("hidden", "32", "hidden: expected a non-empty list"),
    ("hidden", (32, 0), "hidden: expected a positive integer"),
    ("hidden", (32, 2.5), "hidden: expected a positive integer"),
    ("activation", "gelu", "activation: expected one of"),
    ("loss", "kl", "loss: expected one of \\['bce', 'mse'\\]"),
    ("epochs", 0, "epochs: expected a positive integer"),
    ("epochs", True, "epochs: expected a positive integer"),
    ("batch_size", -4, "batch_size: expected a positive integer"),
    ("lr", 0.0, "lr: expected a finite number > 0"),
    ("lr", math.nan, "lr: expected a finite number > 0"),
    ("weight_decay", -1e-4, "weight_decay: expected a finite number >= 0.0"),
    ("noise", -0.1, "noise: expected a finite number >= 0.0"),
    ("noise", math.inf, "noise: expected a finite number >= 0.0"),
    ("val_fraction", 1.0, "val_fraction: expected a number >= 0.0 and < 1.0"),
    ("val_fraction", -0.1, "val_fraction: expected a finite number >= 0.0"),
    ("seed", -1, "seed: expected an integer in \\[0, 2\\*\\*32\\)"),
    ("num_threads", 0, "num_threads: expected None or a positive integer"),
]


@pytest.mark.parametrize("field,value,match", BAD, ids=[f"{f}={v!r}" for f, v, _ in BAD])
def test_bad_config_value_is_one_clear_error(field, value, match):
    with pytest.raises(ArgumentError, match=f"^{match}") as exc:
        DistillConfig(**{field: value})
    assert repr(value) in str(exc.value) or field == "hidden"


def test_config_is_frozen_and_round_trips():
    cfg = DistillConfig(hidden=[48, 32], epochs=np.int64(5), lr=np.float32(0.5))
    assert cfg.hidden == (48, 32) and type(cfg.epochs) is int and type(cfg.lr) is float
    assert DistillConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(AttributeError):
        cfg.epochs = 3
    with pytest.raises(ArgumentError, match=r"config: unknown field\(s\) \['epoch'\]"):
        DistillConfig.from_dict({"epoch": 3})


_VALID = {
    "hidden": st.lists(st.integers(1, 512), min_size=1, max_size=4),
    "activation": st.sampled_from(["relu", "tanh", "silu", "elu"]),
    "loss": st.sampled_from(["bce", "mse"]),
    "epochs": st.integers(1, 10_000),
    "batch_size": st.integers(1, 1 << 16),
    "lr": st.floats(1e-8, 10.0),
    "weight_decay": st.floats(0.0, 1.0),
    "noise": st.floats(0.0, 5.0),
    "val_fraction": st.floats(0.0, 0.999),
    "seed": st.integers(0, 2**32 - 1),
    "num_threads": st.none() | st.integers(1, 64),
}
_INVALID = {
    "hidden": st.sampled_from([[], [0], [-3], [1.5], "8"]),
    "activation": st.text(max_size=6).filter(lambda s: s not in ("relu", "tanh", "silu", "elu")),
    "loss": st.text(max_size=6).filter(lambda s: s not in ("bce", "mse")),
    "epochs": st.integers(max_value=0) | st.booleans() | st.floats(allow_nan=True),
    "batch_size": st.integers(max_value=0) | st.just("256"),
    "lr": st.floats(max_value=0.0) | st.just(math.nan) | st.just(math.inf),
    "weight_decay": st.floats(max_value=-1e-12) | st.just(math.inf),
    "noise": st.floats(max_value=-1e-12) | st.just(math.nan),
    "val_fraction": st.floats(min_value=1.0, allow_infinity=True) | st.floats(max_value=-1e-12),
    "seed": st.integers(max_value=-1) | st.integers(min_value=2**32),
    "num_threads": st.integers(max_value=0),
}


@settings(max_examples=150, deadline=None)
@given(valid=st.fixed_dictionaries({}, optional=_VALID), field=st.sampled_from(sorted(_INVALID)), data=st.data())
def test_config_accepts_its_range_and_names_the_field_outside_it(valid, field, data):
    """Any values from the documented ranges build a config that survives JSON; one value outside its
    range, among valid others, is an ArgumentError naming that field."""
    cfg = DistillConfig(**valid)
    assert DistillConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    bad = data.draw(_INVALID[field])
    with pytest.raises(ArgumentError) as exc:
        DistillConfig(**{**valid, field: bad})
    assert str(exc.value).startswith(f"{field}:")


def test_bad_arguments_are_one_clear_error(tmp_path):
    teacher = _teacher(tmp_path)
    with pytest.raises(ValueError, match=r"^x_train: expected shape \(B, 8\)"):
        distill_state_critic(teacher, np.zeros((10, 5), np.float32))
    with pytest.raises(ValueError, match="^x_train: expected finite values"):
        distill_state_critic(teacher, np.full((10, 8), np.nan, np.float32))
    with pytest.raises(ArgumentError, match="^teacher: expected a TorchStateCritic"):
        distill_state_critic(object(), _x())
    with pytest.raises(ArgumentError, match="^config: expected a DistillConfig, got dict"):
        distill_state_critic(teacher, _x(), config={"epochs": 1})
    with pytest.raises(ArgumentError, match="^x_train: expected at least one training row"):
        distill_state_critic(teacher, _x(1), config=DistillConfig(val_fraction=0.6))


@pytest.mark.parametrize("change,field", [
    ({"task": "FetchPush-v4"}, "task"),
    ({"layout": dict(LAYOUT, obs_dim=9, sizes=dict(LAYOUT["sizes"], observation=5))}, "obs_dim"),
    ({"layout": dict(LAYOUT, keys=["observation", "desired_goal", "achieved_goal"])}, "keys"),
    ({"layout": dict(LAYOUT, sizes={"observation": 3, "achieved_goal": 3, "desired_goal": 2})}, "sizes"),
])
def test_layout_mismatch_names_the_field(change, field):
    teacher_meta = {"task": "PointMaze_UMaze-v3", "layout": LAYOUT}
    check_data_layout(dict(teacher_meta), teacher_meta, data="d", teacher="t.json")
    with pytest.raises(ArgumentError) as exc:
        check_data_layout({**teacher_meta, **change}, teacher_meta, data="d", teacher="t.json")
    msg = str(exc.value)
    assert msg.startswith("data: ") and "'d'" in msg and "'t.json'" in msg
    assert (f"in {field!r}" in msg) if field != "task" else "holds task 'FetchPush-v4'" in msg


# --------------------------------------------------------------------------- CLI on a tiny collected data set

MAZE = "PointMaze_UMaze-v3"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two tiny PointMaze collections (the teacher's with outcome labels, and an unlabelled second one)
    and a teacher trained on the first by `prm-critic train-critic`."""
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.labels import label

    root = tmp_path_factory.mktemp("distill")
    collect(MAZE, root / "data", episodes=8, max_episode_steps=30, seed=0, progress=False)
    label(root / "data", "outcome", progress=False)
    collect(MAZE, root / "more", episodes=3, max_episode_steps=30, seed=1, progress=False)
    rc = main(["train-critic", "--data", str(root / "data"), "--label", "outcome", "--out", str(root / "teacher"),
               "--epochs", "2", "--hidden", "16,16", "--holdout", "0.25", "--no-progress"])
    assert rc == 0
    return root


def test_load_steps_without_labels_gives_the_same_states(tiny):
    from prm_critic.robotics.dataset import load_steps

    bare, labelled = load_steps(tiny / "data", None), load_steps(tiny / "data", "outcome")
    np.testing.assert_array_equal(bare.x, labelled.x)
    np.testing.assert_array_equal(bare.episode, labelled.episode)
    np.testing.assert_array_equal(bare.progress, labelled.progress)
    assert not bare.mask.any() and np.isnan(bare.success).all() and bare.family is None


def test_cli_distill_end_to_end(tiny, tmp_path, capsys):
    from prm_critic.cli import main

    capsys.readouterr()
    out = tmp_path / "student"
    rc = main(["distill", "--critic", str(tiny / "teacher.json"), "--data", str(tiny / "data"), str(tiny / "more"),
               "--hidden", "8", "8", "--epochs", "3", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "held-out: 2 episodes" in printed and "AUROC success" in printed and "weights (float32 bytes)" in printed
    teacher = load_state_critic(tiny / "teacher.json")
    student = load_state_critic(out)
    meta = student.meta
    assert student.net.hidden == (8, 8)
    assert meta["distilled_from"] == json.loads((tiny / "teacher.json").read_text())["weights_sha256"]
    assert meta["data"]["test_episodes"] == teacher.meta["data"]["test_episodes"]
    assert meta["data"]["extra"] == ["more"]
    n_teacher_train = teacher.meta["metrics"]["n_train_steps"]
    assert meta["data"]["n_train_rows"] > n_teacher_train  # the second folder's episodes were added
    assert meta["teacher_metrics"]["auroc_success"] == pytest.approx(teacher.meta["metrics"]["auroc_success"])
    assert meta["layout"] == teacher.meta["layout"] and meta["label_family"] == "outcome"
    doc = json.loads((tmp_path / "student.metrics.json").read_text())
    assert set(doc) >= {"student", "teacher", "history"} and doc["distilled_from"] == meta["distilled_from"]


def _bad_run(capsys, *argv) -> str:
    from prm_critic.cli import main

    capsys.readouterr()
    rc = main(["distill", *argv, "--epochs", "1", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    return err


def test_cli_refuses_a_layout_another_split_or_a_teacher_without_split(tiny, tmp_path, capsys):
    changed = tmp_path / "changed"
    shutil.copytree(tiny / "data", changed)
    meta = json.loads((changed / "meta.json").read_text())
    meta["layout"]["sizes"] = {"observation": 3, "achieved_goal": 3, "desired_goal": 2}
    (changed / "meta.json").write_text(json.dumps(meta))
    teacher = str(tiny / "teacher.json")
    err = _bad_run(capsys, "--critic", teacher, "--data", str(changed), "--out", str(tmp_path / "s"))
    assert "differs from the teacher's in 'sizes'" in err and str(changed) in err
    # extra folders are checked too
    err = _bad_run(capsys, "--critic", teacher, "--data", str(tiny / "data"), str(changed), "--out", str(tmp_path / "s"))
    assert "in 'sizes'" in err
    # the right layout, but not the teacher's episodes
    err = _bad_run(capsys, "--critic", teacher, "--data", str(tiny / "more"), "--out", str(tmp_path / "s"))
    assert "is not the data" in err and "held-out split" in err
    # a teacher that records no split
    t = load_state_critic(teacher)
    save_state_critic(tmp_path / "nosplit", t.net, {k: v for k, v in t.meta.items() if k != "data"})
    err = _bad_run(capsys, "--critic", str(tmp_path / "nosplit.json"), "--data", str(tiny / "data"),
                   "--out", str(tmp_path / "s"))
    assert "records no held-out split" in err
    err = _bad_run(capsys, "--critic", teacher, "--data", str(tiny / "data"), "--out", str(tmp_path / "s"),
                   "--hidden", "8", "0")
    assert "hidden: expected a positive integer" in err
    assert not (tmp_path / "s.json").exists()
