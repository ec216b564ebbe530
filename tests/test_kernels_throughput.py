"""The kernels that make one more sequence cheap (issue 21), each against an independent NumPy reference."""

import numpy as np
import pytest

import mhalearn
from mhalearn.learners.chen_li.phase3_refine_sum import margin_mass


def _margin_mass_reference(X, theta):
    """Top token and the softmax mass on its copies, by NumPy on the (n, k, k) logits."""
    logits = np.einsum("nkd,de,nje->nkj", X, theta, X)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    top = weights.argmax(axis=-1)
    copies = np.all(X[:, :, None, :] == X[:, None, :, :], axis=-1)  # token j == token j'
    mass = np.sum(weights * np.take_along_axis(copies, top[:, :, None], axis=1), axis=-1)
    return top, mass


@pytest.mark.parametrize("length, dim, scale", [(2, 3, 1.0), (4, 5, 0.5), (6, 4, 3.0)])
def test_margin_mass_matches_numpy(rng, length, dim, scale):
    X = mhalearn.boolean_inputs(200, length, dim, rng=rng)
    X[:50, 1] = X[:50, 0]  # copies of a token share its mass
    X[50:80] = X[50:80, :1]  # every token the same: the whole row is on the copies
    theta = scale * rng.standard_normal((dim, dim))
    top, mass = margin_mass(X, theta)
    expected_top, expected_mass = _margin_mass_reference(X, theta)
    np.testing.assert_array_equal(top, expected_top)
    np.testing.assert_allclose(mass, expected_mass, rtol=0, atol=1e-13)
    np.testing.assert_allclose(mass[50:80], 1.0, rtol=0, atol=1e-15)


def test_margin_mass_on_real_inputs_and_ties(rng):
    X = rng.standard_normal((100, 3, 4))
    top, mass = margin_mass(X, np.zeros((4, 4)))  # uniform attention: the first token wins the tie
    np.testing.assert_array_equal(top, 0)
    np.testing.assert_allclose(mass, 1.0 / 3.0, rtol=1e-15)
    theta = rng.standard_normal((4, 4))
    expected_top, expected_mass = _margin_mass_reference(X, theta)
    top, mass = margin_mass(X, theta)
    np.testing.assert_array_equal(top, expected_top)
    np.testing.assert_allclose(mass, expected_mass, rtol=0, atol=1e-13)


@pytest.mark.parametrize("dim", [1, 5, 6, 7, 12, 13])
def test_token_times_by_sign_tables_matches_the_product(rng, dim):
    from numba import njit

    from mhalearn.learners.chen_li.sign_tables import sign_tables, token_times

    @njit
    def products(X, tables, matrix):
        out = np.empty((X.shape[0], matrix.shape[1]))
        for s in range(X.shape[0]):
            token_times(X[s], tables, matrix, out[s])
        return out

    matrix = rng.standard_normal((dim, dim))
    X = mhalearn.boolean_inputs(300, 1, dim, rng=rng)[:, 0]
    X[:40] *= 0.5  # not ±1: multiplied out
    X[40:60, 0] = 0.0
    result = products(X, sign_tables(matrix), matrix)
    np.testing.assert_allclose(result, X @ matrix, rtol=0, atol=1e-12 * np.abs(matrix).sum())
