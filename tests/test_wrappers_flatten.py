"""The wrappers' per-step flattening (``ObsFlattener``) gives what the checked reference
(``flatten_checked``) gives, for any observation: the same float32 row, or the same error naming
the key (property test over dtypes, shapes, missing keys, NaN/inf, non-array values)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.wrappers._common import ObsFlattener, flatten_checked

LAYOUT = CriticInputLayout.from_dict({"keys": ["observation", "achieved_goal", "desired_goal"],
                                      "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}})
#: a row long enough for the dot-product finiteness check
LONG = CriticInputLayout.from_dict({"keys": ["observation", "achieved_goal", "desired_goal"],
                                    "sizes": {"observation": 400, "achieved_goal": 3, "desired_goal": 3}})
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
        what = draw(st.sampled_from(["ok"] * 6 + ["missing", "row", "wrong_size", "scalar_list", "float", "bad"]))
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
        obs[k] = arr.tolist() if what == "scalar_list" else (float(a[0]) if what == "float" else arr)
    if draw(st.booleans()):
        obs["extra"] = np.zeros(2)
    return obs


@pytest.mark.parametrize("layout", [LAYOUT, LONG], ids=["31", "406"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_flattener_equals_the_checked_reference(layout, data):
    obs = data.draw(observations(layout))
    fast = _outcome(ObsFlattener(layout), obs)
    ref = _outcome(lambda o: flatten_checked(layout, o), obs)
    if isinstance(ref, tuple):
        assert isinstance(fast, tuple) and fast == ref
    else:
        assert isinstance(fast, np.ndarray) and fast.dtype == np.float32 and fast.shape == (layout.obs_dim,)
        np.testing.assert_array_equal(fast, ref)
        assert not any(np.shares_memory(fast, v) for v in obs.values() if isinstance(v, np.ndarray))


@pytest.mark.parametrize("obs", [None, "observation", [1.0] * 31, np.zeros(31, np.float32)])
def test_flattener_refuses_a_non_mapping_like_the_reference(obs):
    with pytest.raises(TypeError) as fast:
        ObsFlattener(LAYOUT)(obs)
    with pytest.raises(TypeError) as ref:
        flatten_checked(LAYOUT, obs)
    assert str(fast.value) == str(ref.value)
