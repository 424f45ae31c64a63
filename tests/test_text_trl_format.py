"""TRL stepwise format: soft labels stay floats, clear errors, atomic JSONL."""

import json

import pytest

from prm_critic.text.trl_format import (
    StepwiseExample,
    from_columns,
    read_stepwise_jsonl,
    to_columns,
    write_stepwise_jsonl,
)


def test_roundtrip_keeps_soft_labels(tmp_path):
    exs = [
        StepwiseExample("2+2?", ["2+2 is 4", "so 4"], [0.7, 1.0]),
        StepwiseExample("go", ["north", "south", "east"], [True, False, 0.25], progress=[0.1, 0.5, 1]),
    ]
    p = write_stepwise_jsonl(tmp_path / "d.jsonl", exs)
    back = read_stepwise_jsonl(p)
    assert back[0].labels == [0.7, 1.0]
    assert all(isinstance(v, float) for v in back[1].labels)
    assert back[1].labels == [1.0, 0.0, 0.25]
    assert back[1].progress == [0.1, 0.5, 1.0]
    assert back[0].progress is None
    # the file is plain TRL-style JSON Lines
    first = json.loads(p.read_text().splitlines()[0])
    assert first == {"prompt": "2+2?", "completions": ["2+2 is 4", "so 4"], "labels": [0.7, 1.0]}
    # atomic write leaves no temp files behind
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d.jsonl"]


def test_columns_roundtrip():
    exs = [StepwiseExample("p", ["a", "b"], [0.7, 0.3]), StepwiseExample("q", ["c"], [1.0])]
    cols = to_columns(exs)
    assert cols == {"prompt": ["p", "q"], "completions": [["a", "b"], ["c"]], "labels": [[0.7, 0.3], [1.0]]}
    assert from_columns(cols) == exs
    with pytest.raises(ValueError, match=r"columns\['labels'\]: expected 2 rows"):
        from_columns({"prompt": ["p", "q"], "completions": [["a"], ["b"]], "labels": [[1.0]]})


def test_bool_labels_for_trl_prm_trainer(tmp_path):
    """TRL's PRMTrainer (TRL <= 1.13) casts labels with int(): the writer can emit thresholded bools."""
    exs = [StepwiseExample("p", ["a", "b", "c", "d"], [0.7, 0.5, 0.49, 1.0], progress=[0.2, 0.4, 0.6, 0.8])]
    p = write_stepwise_jsonl(tmp_path / "hard.jsonl", exs, bool_threshold=0.5)
    row = json.loads(p.read_text())
    assert row["labels"] == [True, True, False, True]
    assert all(isinstance(v, bool) for v in row["labels"])
    assert row["progress"] == [0.2, 0.4, 0.6, 0.8]  # TRL ignores it; kept as floats
    assert [int(v) for v in row["labels"]] == [1, 1, 0, 1]  # what TRL's int() then trains on
    assert [int(v) for v in exs[0].labels] == [0, 0, 0, 1]  # ... and what it would make of the soft labels
    assert read_stepwise_jsonl(p)[0].labels == [1.0, 1.0, 0.0, 1.0]
    assert to_columns(exs, bool_threshold=0.75)["labels"] == [[False, False, False, True]]
    assert to_columns(exs)["labels"] == [[0.7, 0.5, 0.49, 1.0]]  # default: soft labels kept
    assert json.loads(write_stepwise_jsonl(tmp_path / "soft.jsonl", exs).read_text())["labels"] == [0.7, 0.5, 0.49, 1.0]
    for bad in (0.0, 1.5, True, "0.5", float("nan")):
        with pytest.raises(ValueError, match=r"bool_threshold: expected None \(soft float labels\) or a float in \(0, 1\]"):
            write_stepwise_jsonl(tmp_path / "x.jsonl", exs, bool_threshold=bad)
        with pytest.raises(ValueError, match=r"bool_threshold: expected None"):
            to_columns(exs, bool_threshold=bad)
    assert not (tmp_path / "x.jsonl").exists()


def test_mismatched_labels_is_a_clear_error():
    with pytest.raises(ValueError, match=r"labels: expected 3 labels \(one per completion step\), got 2"):
        StepwiseExample("p", ["a", "b", "c"], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"progress: expected 1 labels"):
        StepwiseExample("p", ["a"], [0.5], progress=[0.1, 0.2])


@pytest.mark.parametrize(
    "kwargs, err, msg",
    [
        (dict(prompt="p", completions=[], labels=[]), ValueError, r"completions: expected at least one step"),
        (dict(prompt="p", completions=["a"], labels=[1.5]), ValueError, r"labels\[0\]: expected a float in \[0, 1\], got 1.5"),
        (dict(prompt="p", completions=["a"], labels=[float("nan")]), ValueError, r"labels\[0\]: expected a float in \[0, 1\]"),
        (dict(prompt="p", completions=["a"], labels=["good"]), TypeError, r"labels\[0\]: expected a float in \[0, 1\], got 'good'"),
        (dict(prompt="p", completions="abc", labels=[1.0]), TypeError, r"completions: expected a list of str"),
        (dict(prompt="p", completions=["a", 3], labels=[1.0, 1.0]), TypeError, r"completions\[1\]: expected str"),
        (dict(prompt=None, completions=["a"], labels=[1.0]), TypeError, r"prompt: expected str"),
    ],
)
def test_bad_examples(kwargs, err, msg):
    with pytest.raises(err, match=msg):
        StepwiseExample(**kwargs)


def test_bad_jsonl_names_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "p", "completions": ["a"], "labels": [1]}\n\n{"prompt": "p", "completions": ["a", "b"], "labels": [1]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:3: labels: expected 2 labels"):
        read_stepwise_jsonl(p)
    p.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not valid JSON"):
        read_stepwise_jsonl(p)
    p.write_text('{"prompt": "p", "labels": [1]}\n')
    with pytest.raises(KeyError, match=r"missing field\(s\) \['completions'\]"):
        read_stepwise_jsonl(p)
    with pytest.raises(FileNotFoundError, match=r"path: .*nope.jsonl"):
        read_stepwise_jsonl(tmp_path / "nope.jsonl")


def test_text_package_import_is_light():
    import subprocess
    import sys

    code = ("import sys, prm_critic.text as t; t.StepwiseExample('p', ['a'], [1.0]); t.VerifierCritic(); "
            "heavy = [m for m in ('torch', 'transformers', 'langchain_core') if m in sys.modules]; "
            "assert not heavy, heavy")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
