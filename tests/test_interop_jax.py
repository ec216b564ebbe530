"""JAX interop: float64 or a refusal that says how to get it; skipped where jax is not installed."""

from contextlib import contextmanager

import numpy as np
import pytest

import mhalearn
from mhalearn.attention import kernels

jax = pytest.importorskip("jax", reason="JAX interop needs the 'jax' extra (pip install 'mhalearn[jax]')")

ENABLE_X64 = 'jax.config.update("jax_enable_x64", True)'


@contextmanager
def x64(enabled: bool):
    """JAX's float64 switch set to ``enabled`` inside the block, restored after it."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


def test_to_jax_is_a_pure_float64_function_equal_to_predict():
    teacher = mhalearn.sample_teacher(2, 4, rng=5)
    X = mhalearn.boolean_inputs(30, 5, 4, rng=6)
    Y = teacher.predict(X) + 0.1
    with x64(True):
        apply, params = teacher.to_jax()
        assert params["thetas"].dtype == np.float64 and params["ws"].dtype == np.float64
        out = np.asarray(apply(params, X))
        assert out.dtype == np.float64
        # float64 throughout: agreement to rounding, eight digits finer than float32 could give.
        assert np.max(np.abs(out - teacher.predict(X))) <= 1e-13 * np.max(np.abs(teacher.predict(X)))
        loss = lambda p: 0.5 * ((apply(p, X) - Y) ** 2).sum() / len(X)  # noqa: E731
        gradient = jax.grad(loss)(params)
    _, d_thetas, d_ws = kernels.loss_and_grad(X, Y, teacher.thetas, teacher.ws)
    np.testing.assert_allclose(np.asarray(gradient["thetas"]), d_thetas, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gradient["ws"]), d_ws, rtol=1e-9, atol=1e-12)


def test_to_jax_without_x64_refuses_and_says_how_to_enable_it():
    teacher = mhalearn.sample_teacher(2, 4, rng=5)
    with x64(False):
        with pytest.raises(RuntimeError, match=r"float64.*" + ENABLE_X64.replace("(", r"\(").replace(")", r"\)")):
            teacher.to_jax()


def test_apply_refuses_once_x64_is_switched_off():
    teacher = mhalearn.sample_teacher(2, 4, rng=5)
    X = mhalearn.boolean_inputs(3, 5, 4, rng=6)
    with x64(True):
        apply, params = teacher.to_jax()
    with x64(False):
        with pytest.raises(RuntimeError, match="jax_enable_x64"):
            apply(params, X)
