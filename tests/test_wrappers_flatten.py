"""The one flattener (``ObsFlattener``, behind ``CriticInputLayout.flatten`` and the wrappers' per-step
path) gives what its checked reference (``ObsFlattener.checked``) gives, for any observation: the same
float32 row, or the same error naming the key (property test over dtypes, shapes, missing keys,
NaN/inf, non-array values, sizes that add up to the right total; layouts of one to four keys and a Box)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_critic.robotics.layout import CriticInputLayout, ObsFlattener

LAYOUT = CriticInputLayout.from_dict({"keys": ["observation", "achieved_goal", "desired_goal"],
                                      "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}})
#: a row long enough for the dot-product finiteness check
LONG = CriticInputLayout.from_dict({"keys": ["observation", "achieved_goal", "desired_goal"],
                                    "sizes": {"observation": 400, "achieved_goal": 3, "desired_goal": 3}})
#: one, two and four keys (the per-step path compares the lengths as a tuple; three keys: one by one)
ONE = CriticInputLayout.from_dict({"keys": ["observation"], "sizes": {"observation": 7}})
TWO = CriticInputLayout.from_dict({"keys": ["observation", "desired_goal"], "sizes": {"observation": 5, "desired_goal": 1}})
FOUR = CriticInputLayout.from_dict({"keys": ["a", "b", "c", "d"], "sizes": {"a": 2, "b": 3, "c": 1, "d": 4}})
BOX = CriticInputLayout(("obs",), {"obs": 6})
DTYPES = ["float64", "float32", "float16", "int64", "uint8", "bool", "complex128", "object", "<U3"]


def _outcome(fn, obs):
    try:
        out = fn(obs)
    except Exception as exc:  # noqa: BLE001 - compared below
        return type(exc), str(exc)
    return out


@st.composite
def observations(draw, layout):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    obs: dict = {}
    for k in layout.keys:
        what = draw(st.sampled_from(["ok"] * 6 + ["missing", "row", "column", "wrong_size", "scalar_list", "float",
                                                  "bad", "text", "swap"]))
        size = layout.sizes[k]
        a = rng.standard_normal(size) * 10
        if what == "missing":
            continue
        if what == "bad":
            a[draw(st.integers(0, size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        if what == "wrong_size":
            a = a[: size - 1] if size > 1 else np.zeros(2)
        dtype = draw(st.sampled_from(DTYPES)) if draw(st.booleans()) else "float64"
        with np.errstate(invalid="ignore"):
            arr = a.astype(dtype) if dtype not in ("object", "<U3") or what != "bad" else a.astype(dtype)
        if what == "row":
            arr = arr.reshape(1, -1)
        if what == "column":  # every key a column: one 2-D result, copied key by key
            arr = arr.reshape(-1, 1)
        if what == "swap":  # this key one value short, the next one value long: the same total size
            arr = arr[:-1] if size > 1 else arr
            obs["__grow__"] = k
        if what == "text":  # a value with a length but no numbers
            arr = "x" * size
        obs[k] = arr.tolist() if what == "scalar_list" else (float(a[0]) if what == "float" else arr)
    grow = obs.pop("__grow__", None)
    if grow is not None:
        i = list(layout.keys).index(grow)
        nxt = layout.keys[(i + 1) % len(layout.keys)]
        if nxt in obs and isinstance(obs[nxt], np.ndarray) and obs[nxt].ndim == 1:
            obs[nxt] = np.concatenate([obs[nxt], obs[nxt][:1]])
    if draw(st.booleans()):
        obs["extra"] = np.zeros(2)
    return obs


@pytest.mark.parametrize("layout", [LAYOUT, LONG, ONE, TWO, FOUR], ids=["31", "406", "1 key", "2 keys", "4 keys"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_flattener_equals_the_checked_reference(layout, data):
    obs = data.draw(observations(layout))
    ref = _outcome(lambda o: ObsFlattener(layout).checked(o), obs)
    f = ObsFlattener(layout)
    for fast in (_outcome(f, obs), _outcome(f.one, obs), _outcome(lambda o: layout.flatten(o, batched=False), obs)):
        if isinstance(ref, tuple):
            assert isinstance(fast, tuple) and fast == ref
        else:
            assert isinstance(fast, np.ndarray) and fast.dtype == np.float32 and fast.shape == (layout.obs_dim,)
            np.testing.assert_array_equal(fast, ref)
            assert not any(np.shares_memory(fast, v) for v in obs.values() if isinstance(v, np.ndarray))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(6,), (1, 6), (6, 1), (2, 3), (5,), (7,), ()]),
       dtype=st.sampled_from(DTYPES), bad=st.sampled_from([None, np.nan, np.inf]), as_list=st.booleans())
def test_box_flattener_equals_the_checked_reference(seed, shape, dtype, bad, as_list):
    a = np.array(np.random.default_rng(seed).standard_normal(shape) * 10)
    if bad is not None and a.size:
        a.reshape(-1)[0] = bad
    with np.errstate(invalid="ignore"):
        obs = a.astype(dtype)
    obs = obs.tolist() if as_list else obs
    ref = _outcome(lambda o: ObsFlattener(BOX).checked(o), obs)
    for fast in (_outcome(ObsFlattener(BOX), obs), _outcome(ObsFlattener(BOX).one, obs)):
        if isinstance(ref, tuple):
            assert isinstance(fast, tuple) and fast == ref
        else:
            assert isinstance(fast, np.ndarray) and fast.dtype == np.float32 and fast.shape == (6,)
            assert fast.tobytes() == ref.tobytes() and not np.shares_memory(fast, obs)


@pytest.mark.parametrize("obs", [None, "observation", [1.0] * 31, np.zeros(31, np.float32)])
def test_flattener_refuses_a_non_mapping_like_the_reference(obs):
    with pytest.raises(TypeError) as fast:
        ObsFlattener(LAYOUT)(obs)
    with pytest.raises(TypeError) as ref:
        ObsFlattener(LAYOUT).checked(obs)
    assert str(fast.value) == str(ref.value)


def test_layout_flatten_is_the_same_flattener_for_one_observation_or_a_batch():
    rng = np.random.default_rng(0)
    f = ObsFlattener(LAYOUT)
    obs = {k: rng.standard_normal(LAYOUT.sizes[k]) for k in LAYOUT.keys}
    assert LAYOUT.flatten(obs).tobytes() == f(obs).tobytes() == f.checked(obs).tobytes()
    batch = {k: rng.standard_normal((4, LAYOUT.sizes[k])) for k in LAYOUT.keys}
    got = LAYOUT.flatten(batch)  # 2-D values: a batch
    assert got.shape == (4, 31) and got.tobytes() == f.batch(batch).tobytes() == f.checked(batch, batched=True).tobytes()
    box = CriticInputLayout(("obs",), {"obs": 6})
    assert box.flatten(np.arange(6)).shape == (6,) and box.flatten(np.zeros((3, 6))).shape == (3, 6)
    bad = {**batch, "desired_goal": batch["desired_goal"].copy()}
    bad["desired_goal"][2, 1] = np.nan
    with pytest.raises(ValueError, match=r"observation: expected finite values, got nan at desired_goal\[1\] "
                                         r"\(batch row 2\)"):
        LAYOUT.flatten(bad)
    with pytest.raises(KeyError, match=r"episode 3: missing key 'observation'"):
        LAYOUT.flatten({}, name="episode 3")
    with pytest.raises(ValueError, match=r"observation\['achieved_goal'\]: expected 3 values per step"):
        LAYOUT.flatten({**obs, "achieved_goal": np.zeros(2)})


def test_layout_pickles_and_copies_with_its_flattener():
    import copy
    import pickle

    obs = {k: np.ones(LAYOUT.sizes[k]) for k in LAYOUT.keys}
    for lay in (copy.deepcopy(LAYOUT), pickle.loads(pickle.dumps(LAYOUT))):
        assert lay.to_dict() == LAYOUT.to_dict() and lay.slices == LAYOUT.slices
        assert lay.flatten(obs).tobytes() == LAYOUT.flatten(obs).tobytes()
    # the flattener itself: rebuilt from its layout, its per-step function its own (not the original's)
    f = ObsFlattener(LAYOUT)
    for g in (copy.deepcopy(f), pickle.loads(pickle.dumps(f))):
        assert g.layout.to_dict() == LAYOUT.to_dict() and g.one is not f.one
        assert g(obs).tobytes() == g.one(obs).tobytes() == f(obs).tobytes()
