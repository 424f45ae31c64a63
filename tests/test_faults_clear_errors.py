"""Clear errors instead of tracebacks (reliability item 64): a file where a folder goes, a Ray
address where nothing listens, an ONNX graph adding a layer's output to itself, an ensemble file
where one checkpoint is needed, Ctrl-C (what was kept, how to resume) and ``--resume`` with nothing
saved. Each answer is one line on stderr with exit status 2 (130 for Ctrl-C). Real files, a real
local socket for Ray, real onnx graphs.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest

from faults import correct, loud

pytestmark = pytest.mark.fault

ITEM = 64


def _line(capsys, *, notes: int = 0) -> str:
    """The one error line on stderr (after ``notes`` lines the command prints before it)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 + notes and not any("Traceback" in ln for ln in err), err
    return err[-1]


def test_collect_out_naming_a_file_is_one_line(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    f = tmp_path / "notes.txt"
    f.write_text("not a folder")
    for out, why in ((f, "(an existing file)"), (f / "data", f"(under {str(f)!r}, an existing file)")):
        capsys.readouterr()
        rc = main(["collect", "--task", "PointMaze_UMaze-v3", "--out", str(out), "--episodes", "1", "--no-progress"])
        err = _line(capsys)
        assert rc == 2 and f"out_dir: expected a folder to collect into, got {str(out)!r} {why}" in err, err
        correct(ITEM, f"collect --out {'naming an existing file' if out == f else 'under an existing file'}",
                "one line, exit 2: " + err.split("error: ", 1)[1])
    assert f.read_text() == "not a folder"


def test_ray_address_with_nothing_listening_is_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray")
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PRM_RAY_CONNECT_S", "5")
    capsys.readouterr()
    rc = main(["collect", "--task", "PointMaze_UMaze-v3", "--out", str(tmp_path / "d"), "--episodes", "1",
               "--max-episode-steps", "5", "--executor", "ray", "--address", f"127.0.0.1:{port}", "--no-progress"])
    err = _line(capsys, notes=1)  # the executor's choice, printed before it connects
    assert rc == 2 and f"address: nothing answers at '127.0.0.1:{port}'" in err, err
    correct(ITEM, "collect --executor ray --address of a port where nothing listens",
            "one line, exit 2: " + err.split("error: ", 1)[1])


def test_numpy_mlp_critic_on_a_layer_added_to_itself_is_unsupported(tmp_path):
    torch = pytest.importorskip("torch")
    onnx = pytest.importorskip("onnx")
    from prm_critic.models.state_critic import StateCriticNet
    from prm_critic.onnx import NumpyMLPCritic, OnnxCritic, export_state_critic, seal_onnx
    from prm_critic.onnx.fast import UnsupportedGraphError

    torch.manual_seed(0)
    net = StateCriticNet(6, hidden=(8,), activation="relu")
    net.set_normalization(np.zeros(6), np.ones(6))
    path = export_state_critic(net, tmp_path / "c.onnx", task="FetchReach-v4")
    model = onnx.load(str(path))
    g = model.graph
    gemm = next(n for n in g.node if n.op_type == "Gemm")
    w = next(t for t in g.initializer if t.name == gemm.input[1])
    wt = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w).T.copy(), w.name + "_t")
    g.initializer.append(wt)
    i = list(g.node).index(gemm)
    mm = onnx.helper.make_node("MatMul", [gemm.input[0], wt.name], ["h"], name="mm")
    add = onnx.helper.make_node("Add", ["h", "h"], [gemm.output[0]], name="h_plus_h")  # Add(h, h): no bias
    g.node.remove(gemm)
    g.node.insert(i, add)
    g.node.insert(i, mm)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    seal_onnx(path)
    OnnxCritic(path, provider="cpu").score_one(np.zeros(6))  # a valid graph: onnxruntime runs it
    with loud(ITEM, "NumpyMLPCritic on a MatMul + Add(h, h) graph", UnsupportedGraphError,
              match=r"\(Add: inputs \['h', 'h'\].*expected Add\(x, bias\) with a bias initializer, not the layer's "
                    r"output added to itself"):
        NumpyMLPCritic(path)


def test_an_ensemble_file_where_one_checkpoint_is_needed_is_named(tmp_path, capsys):
    pytest.importorskip("torch")
    from sb3_helpers import tiny_state_critic

    from prm_critic.cli import main
    from prm_critic.models.checkpoint import save_state_critic
    from prm_critic.models.ensemble import save_critic_ensemble

    paths = []
    for i in range(2):
        net, meta, _ = tiny_state_critic("FetchReach-v4")
        paths.append(save_state_critic(tmp_path / f"m{i}", net, meta).with_suffix(".json"))
    ens = save_critic_ensemble(tmp_path / "ens.json", paths)
    for argv in (["export", "--checkpoint", str(ens)],
                 ["distill", "--critic", str(ens), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "s")]):
        capsys.readouterr()
        rc = main(argv)
        err = _line(capsys)
        assert rc == 2 and f"checkpoint: {str(ens)!r} is a critic ensemble (written by prm-critic ensemble, 2 " \
                           "members), not one state-critic checkpoint" in err and "'m0.json', 'm1.json'" in err, err
        correct(ITEM, f"an ensemble file given to {argv[0]} {argv[1]}", "one line, exit 2: "
                + err.split("error: ", 1)[1])


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tmp_path, capsys, monkeypatch):
    import importlib

    from prm_critic.cli import main

    collect_module = importlib.import_module("prm_critic.robotics.collection")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(collect_module, "collect", interrupted)  # Ctrl-C during the collection
    out = tmp_path / "d"
    rc = main(["collect", "--task", "PointMaze_UMaze-v3", "--out", str(out), "--episodes", "1", "--no-progress"])
    err = _line(capsys)
    assert rc == 130 and err == (f"prm-critic collect: interrupted; the complete shards in {out}/shards are kept; run "
                                 "the same command again to resume"), err
    correct(ITEM, "Ctrl-C during collect", f"exit 130, one line: {err}")


def test_resume_with_nothing_saved_says_so(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    out = tmp_path / "run"
    rc = main(["train-policy", "--task", "FetchReach-v4", "--steps", "60", "--out", str(out), "--resume",
               "--checkpoint-freq", "30", "--no-progress",
               "--algo-kwargs", '{"learning_starts": 30, "batch_size": 8, "policy_kwargs": {"net_arch": [8]}}'])
    err = _line(capsys)
    assert rc == 2 and f"--resume: {str(out / 'resume')!r} holds no saved training state, so there is nothing to " \
                       "continue" in err, err
    assert not (out / "policy.json").exists()  # nothing trained from step 0
    correct(ITEM, "train-policy --resume into a folder with no saved training state",
            "one line, exit 2, nothing trained: " + err.split("error: ", 1)[1])
