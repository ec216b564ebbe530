"""The one Adam(W) and the flat-parameter view of mhalearn.optim, against hand-computed steps."""

import numpy as np
import pytest

from mhalearn.optim import AdamW, FlatParameters


def test_adam_steps_match_the_update_rule_written_out():
    rng = np.random.default_rng(0)
    start = rng.standard_normal((3, 2))
    parameters = {"w": start.copy(), "b": np.zeros(2)}
    adam = AdamW(parameters, beta1=0.8, beta2=0.9, eps=1e-6, weight_decay=0.5, decayed=["w"])
    theta, bias, m, v, mb, vb = start.copy(), np.zeros(2), 0.0, 0.0, 0.0, 0.0
    for t, rate in enumerate([0.1, 0.05, 0.02], start=1):
        grads = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
        adam.step(grads, rate)
        m = 0.8 * m + 0.2 * grads["w"]
        v = 0.9 * v + 0.1 * grads["w"] ** 2
        theta = theta * (1 - rate * 0.5) - rate * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.9 ** t)) + 1e-6)
        mb = 0.8 * mb + 0.2 * grads["b"]
        vb = 0.9 * vb + 0.1 * grads["b"] ** 2
        bias = bias - rate * (mb / (1 - 0.8 ** t)) / (np.sqrt(vb / (1 - 0.9 ** t)) + 1e-6)  # not decayed
    np.testing.assert_allclose(parameters["w"], theta, rtol=1e-14)
    np.testing.assert_allclose(parameters["b"], bias, rtol=1e-14)


def test_adam_first_step_moves_each_coordinate_by_the_learning_rate_against_the_gradient_sign():
    parameters = {"x": np.array([1.0, -2.0, 3.0])}
    AdamW(parameters, eps=0.0).step({"x": np.array([1e-6, -5.0, 300.0])}, 0.01)
    np.testing.assert_allclose(parameters["x"], [0.99, -1.99, 2.99], rtol=1e-12)


def test_adam_refuses_decay_of_unknown_parameters():
    with pytest.raises(ValueError, match="^decayed: expected names of parameters"):
        AdamW({"w": np.zeros(2)}, decayed=["v"])


def test_flat_parameters_round_trip_and_refuse_wrong_shapes():
    layout = FlatParameters((2, 3, 3), (3,), (1, 4))
    arrays = [np.arange(18.0).reshape(2, 3, 3), np.array([-1.0, 0.5, 2.0]), np.ones((1, 4))]
    flat = layout.pack(*arrays)
    assert flat.shape == (layout.size,) == (25,)
    for unpacked, original in zip(layout.unpack(flat), arrays):
        np.testing.assert_array_equal(unpacked, original)
    assert np.shares_memory(layout.unpack(flat)[0], flat)  # views: no copy per objective call
    with pytest.raises(ValueError, match=r"^arrays\[1\]: expected shape \(3,\)"):
        layout.pack(arrays[0], np.ones(4), arrays[2])
    with pytest.raises(ValueError, match=r"^flat: expected shape \(25,\)"):
        layout.unpack(flat[:-1])
