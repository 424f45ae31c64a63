"""The ``steps_to_success`` label family: ``gamma ** (t* - t)``, ``t*`` the first step at or after ``t``
whose next state succeeds, 0 when none does."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_critic.robotics.families import label_families
from prm_critic.robotics.labels import label_params, steps_to_success_labels


def _brute(episode, t, success, gamma):
    out = []
    for i in range(len(t)):
        later = [j for j in range(i, len(t)) if episode[j] == episode[i] and success[j]]
        out.append(gamma ** (t[later[0]] - t[i]) if later else 0.0)
    return np.asarray(out, dtype=np.float32)


def test_hand_computed_labels():
    # episode 0: success at steps 2 and 5 (lost in between); episode 1: never
    episode = np.array([0] * 6 + [1] * 3)
    t = np.array([0, 1, 2, 3, 4, 5, 0, 1, 2])
    success = np.array([0, 0, 1, 0, 0, 1, 0, 0, 0], dtype=bool)
    lab = steps_to_success_labels(episode, t, success, 0.5)
    assert lab.dtype == np.float32
    assert lab.tolist() == [0.25, 0.5, 1.0, 0.25, 0.5, 1.0, 0.0, 0.0, 0.0]
    # gamma 1: every step before a success is worth 1
    assert steps_to_success_labels(episode, t, success, 1.0).tolist() == [1.0] * 6 + [0.0] * 3
    assert steps_to_success_labels(np.array([], int), np.array([], int), np.array([], bool), 0.9).shape == (0,)


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5),
       flags=st.lists(st.booleans(), min_size=60, max_size=60),
       gamma=st.floats(0.01, 1.0))
def test_matches_a_brute_force_scan(lengths, flags, gamma):
    episode = np.concatenate([np.full(n, 10 + i) for i, n in enumerate(lengths)])
    t = np.concatenate([np.arange(n) for n in lengths])
    success = np.asarray(flags[:len(t)], dtype=bool)
    lab = steps_to_success_labels(episode, t, success, gamma)
    assert np.array_equal(lab, _brute(episode, t, success, gamma))
    assert np.all((lab >= 0) & (lab <= 1)) and np.all((lab == 1.0) >= success)


def test_rows_that_are_not_whole_ordered_episodes_are_refused():
    with pytest.raises(ValueError, match=r"shard_00001.npz: episode 0 has steps t = \[1, 0\]\.\.\.; expected 0, 1, 2"):
        steps_to_success_labels(np.array([0, 0]), np.array([1, 0]), np.array([0, 1], bool), 0.9, where="shard_00001.npz")
    with pytest.raises(ValueError, match="the steps of an episode are not in one block"):
        steps_to_success_labels(np.array([0, 1, 0]), np.array([0, 0, 1]), np.zeros(3, bool), 0.9)
    with pytest.raises(ValueError, match=r"differ in length \(2, 2, 3\)"):
        steps_to_success_labels(np.array([0, 0]), np.array([0, 1]), np.zeros(3, bool), 0.9)


def test_family_is_registered_and_checks_its_gamma():
    assert "steps_to_success" in label_families()
    assert label_params("steps_to_success", gamma=0.95) == {"family": "steps_to_success", "gamma": 0.95}
    for bad in (0.0, 1.5, True, "0.9"):
        with pytest.raises(ValueError, match="gamma: expected a number in \\(0, 1\\]"):
            label_params("steps_to_success", gamma=bad)
