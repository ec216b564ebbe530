import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference
from mhalearn import kernels


def _problem(rng, n=7, k=5, d=4, m=3, scale=1.0):
    X = rng.choice([-1.0, 1.0], size=(n, k, d))
    thetas = scale * rng.standard_normal((m, d, d)) / d
    ws = rng.standard_normal((m, d, d)) / np.sqrt(d)
    return X, thetas, ws


def test_forward_matches_reference(rng):
    X, thetas, ws = _problem(rng)
    np.testing.assert_allclose(kernels.forward(X, thetas, ws), reference.forward(X, thetas, ws),
                               rtol=0, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(1, 6), d=st.integers(1, 5), m=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_forward_attention_features_any_shape(n, k, d, m, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, k, d))
    thetas = rng.standard_normal((m, d, d))
    ws = rng.standard_normal((m, d, d))
    out, weights = kernels.forward(X, thetas, ws, return_attention=True)
    np.testing.assert_allclose(out, reference.forward(X, thetas, ws), atol=1e-10)
    np.testing.assert_allclose(weights, reference.attention(X, thetas), atol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12)
    features = kernels.head_features(X, thetas)
    np.testing.assert_allclose(features, reference.head_features(X, thetas), atol=1e-10)
    np.testing.assert_allclose(np.einsum("nmkd,mde->nke", features, ws), out, atol=1e-10)


def test_loss_and_grad_matches_reference(rng):
    X, thetas, ws = _problem(rng, n=11)
    Y = rng.standard_normal(X.shape)
    loss, dth, dw = kernels.loss_and_grad(X, Y, thetas, ws)
    ref_loss, ref_dth, ref_dw = reference.loss_and_grad(X, Y, thetas, ws)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(dth, ref_dth, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-9, atol=1e-12)


def test_gradient_matches_central_differences(rng):
    X, thetas, ws = _problem(rng, n=9, k=6, d=4, m=2, scale=3.0)
    Y = rng.standard_normal(X.shape)
    _, dth, dw = kernels.loss_and_grad(X, Y, thetas, ws)
    step = 1e-6
    for params, grad, which in ((thetas, dth, 0), (ws, dw, 1)):
        numeric = np.empty_like(params)
        for index in np.ndindex(params.shape):
            plus, minus = params.copy(), params.copy()
            plus[index] += step
            minus[index] -= step
            args_plus = (plus, ws) if which == 0 else (thetas, plus)
            args_minus = (minus, ws) if which == 0 else (thetas, minus)
            numeric[index] = (kernels.loss_and_grad(X, Y, *args_plus)[0]
                              - kernels.loss_and_grad(X, Y, *args_minus)[0]) / (2 * step)
        relative = np.linalg.norm(grad - numeric) / np.linalg.norm(numeric)
        assert relative < 1e-5, (which, relative)


def test_extreme_logits_stay_finite(rng):
    X, thetas, ws = _problem(rng, n=5, k=6, d=4, m=2)
    thetas *= 3000.0 / np.linalg.norm(thetas.reshape(2, -1), axis=1)[:, None, None]
    out = kernels.forward(X, thetas, ws)
    assert np.all(np.isfinite(out))
    # Hard attention: each row is the projected token of the argmax logit.
    logits = np.einsum("nkd,mde,nle->nmkl", X, thetas, X)
    loss, dth, dw = kernels.loss_and_grad(X, np.zeros_like(X), thetas, ws)
    assert np.isfinite(loss) and np.all(np.isfinite(dth)) and np.all(np.isfinite(dw))
    weights = kernels.attention(X, thetas)
    top = logits.max(axis=-1, keepdims=True)
    # Weight only on near-maximal logits, and the same as the stable reference.
    assert np.all(weights[logits < top - 50.0] < 1e-20)
    np.testing.assert_allclose(weights, reference.attention(X, thetas), atol=1e-12)
