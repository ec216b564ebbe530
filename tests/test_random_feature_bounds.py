"""The random-feature bound's ingredients against independent references (mhalearn.random_features.bounds)."""

import math

import numpy as np
import pytest
import scipy.special

import mhalearn
from mhalearn.experiments.random_features import make_model
from mhalearn.random_features import bounds as rb


def _cosines(rng, dim, size):
    """Cosines ⟨s, s'⟩ of independent uniform points of S^{d−1}."""
    a, b = rng.standard_normal((2, size, dim))
    return np.einsum("nd,nd->n", a, b) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _gegenbauer(degree, dim, t):
    order = (dim - 2) / 2
    return scipy.special.eval_gegenbauer(degree, order, t) / scipy.special.eval_gegenbauer(degree, order, 1.0)


def _jacobi_rule(dim, nodes=200):
    """Nodes and probability weights of the cosine law, density ∝ (1 − t²)^{(d−3)/2}."""
    t, w = scipy.special.roots_jacobi(nodes, (dim - 3) / 2, (dim - 3) / 2)
    return t, w / w.sum()


def test_arccos_taylor_series_and_kernel_match_the_gaussian_expectation(rng):
    t = np.linspace(-0.9, 0.9, 13)
    series = np.polynomial.polynomial.polyval(t, rb._arccos_taylor())
    np.testing.assert_allclose(series, rb.arccos_kernel(t), atol=1e-12)
    g = rng.standard_normal((2, 400_000))
    for correlation in (-0.6, 0.0, 0.7):
        other = correlation * g[0] + math.sqrt(1 - correlation ** 2) * g[1]
        empirical = np.mean(np.maximum(g[0], 0) * np.maximum(other, 0))
        assert rb.arccos_kernel(correlation) == pytest.approx(empirical, abs=3e-3)
    coefficients = rb._arccos_taylor()
    assert np.all(coefficients >= 0) and np.all(coefficients[3::2] == 0)  # the odd part of ReLU is linear


def test_power_table_expands_monomials_in_gegenbauer_polynomials():
    dim = 7
    table = rb._power_coefficients(dim, 9, 8)
    t = np.linspace(-1, 1, 11)
    for power in range(9):
        expansion = sum(table[power, a] * _gegenbauer(a, dim, t) for a in range(9))
        np.testing.assert_allclose(expansion, t ** power, atol=1e-12)
    assert rb.harmonic_dimension(3, 4) == 9 and rb.harmonic_dimension(16, 1) == 16


def test_attention_kernel_is_the_mean_of_wide_random_features():
    """K(X, X') = N⁻² Σ κ(ρ_0 ρ_jk)(d ρ_jk + 1) against 40 000 zero-mean heads (Gram matrix of 3 inputs)."""
    dim, keys, heads = 6, 3, 40_000
    X = mhalearn.sequence_inputs(3, keys, dim, rng=1)
    model = mhalearn.RandomFeatureAttention(heads, qk_mean="zero", random_state=0).fit(X, np.arange(3.0))
    features = model.transform(X)
    empirical = features @ features.T / heads

    def exact(first, second):
        query = first[0] @ second[0] / dim
        return np.mean([rb.arccos_kernel(query * (first[j] @ second[k] / dim)) * (first[j] @ second[k] + 1)
                        for j in range(1, keys + 1) for k in range(1, keys + 1)])

    expected = np.array([[exact(a, b) for b in X] for a in X])
    np.testing.assert_allclose(empirical, expected, atol=5 * expected.max() / math.sqrt(heads))


def test_mlp_kernel_is_the_mean_of_wide_random_features():
    dim, keys = 5, 3
    X = mhalearn.sequence_inputs(2, keys, dim, rng=2)
    model = mhalearn.RandomFeatureMLP(200_000, random_state=0).fit(X, np.array([0.0, 1.0]))
    features = model.transform(X)
    mean_cosine = np.mean([X[0, i] @ X[1, i] / dim for i in range(keys + 1)])
    assert features[0] @ features[1] / 200_000 == pytest.approx(2 * rb.arccos_kernel((1 + mean_cosine) / 2),
                                                                 rel=0.02)


@pytest.mark.parametrize("query_degree, key_degree", [(0, 1), (1, 0), (1, 1), (2, 0), (0, 2), (2, 2), (2, 1)])
def test_attention_eigenvalues_match_direct_quadrature(query_degree, key_degree):
    """Funk–Hecke: μ_ab = E[h(ρ_0, ρ_1) P_a(ρ_0) P_b(ρ_1)] by a 200 × 200 Gauss–Jacobi rule on the closed-form h."""
    dim = 8
    t, w = _jacobi_rule(dim)
    r0, r1 = np.meshgrid(t, t, indexing="ij")
    h = rb.arccos_kernel(r0 * r1) * (dim * r1 + 1)
    direct = np.einsum("i,j,ij,i,j->", w, w, h, _gegenbauer(query_degree, dim, t), _gegenbauer(key_degree, dim, t))
    table = rb.kernel_spectrum("attention-zero", dim, 5).table
    assert table[query_degree, key_degree] == pytest.approx(direct, rel=1e-6, abs=1e-13)


def test_attention_odd_query_harmonics_of_degree_three_are_unreachable():
    """Only κ_1 is odd: query degree 1 pairs with key degree <= 2 (linear logit times [x_j; 1]), odd >= 3 never."""
    table = rb.kernel_spectrum("attention-zero", 8, 5).table
    assert np.all(table[3::2] == 0.0)
    assert np.all(table[1, :3] > 0) and np.all(table[1, 3:] == 0.0)
    assert np.all(table[::2][:, :6] > 0)  # even query degrees reach every key degree


def test_mlp_eigenvalues_match_quadrature_with_sampled_remaining_keys(rng):
    """E[H(ρ̄) P_a(ρ_0) P_b(ρ_1)], ρ̄ the mean of N + 1 cosines: quadrature in ρ_0, ρ_1, Monte Carlo in the rest."""
    dim, keys = 8, 4
    t, w = _jacobi_rule(dim, 40)
    rest = _cosines(rng, dim, 4000 * (keys - 1)).reshape(4000, keys - 1).sum(axis=1)
    table = rb.kernel_spectrum("mlp", dim, keys).table
    mean = (t[:, None, None] + t[None, :, None] + rest[None, None, :]) / (keys + 1)
    values = (2 * rb.arccos_kernel((1 + mean) / 2)).mean(axis=2)
    for a, b in ((0, 1), (1, 0), (1, 1), (0, 2)):
        direct = np.einsum("i,j,ij,i,j->", w, w, values, _gegenbauer(a, dim, t), _gegenbauer(b, dim, t))
        assert table[a, b] == pytest.approx(direct, rel=0.01), (a, b)


@pytest.mark.parametrize("name", ["mean-linear", "mean-power-1", "mean-power-2", "mean-power-3",
                                  "correlation-relu", "correlation-tanh"])
def test_target_energies_add_up_to_the_variance_of_the_pair_function(name, rng):
    """Σ ‖F_ab‖² equals E[F²] (F centred) by Monte Carlo on the pair (x_0, x_j)."""
    dim = 10
    target = mhalearn.make_random_feature_target(name, dim, rng=0)
    X = mhalearn.sequence_inputs(200_000, 1, dim, rng=3)  # one key: f = F(x_0, x_1)
    values = target(X)
    total = sum(rb.target_components(name, dim).values())
    assert total == pytest.approx(np.var(values), rel=0.02)


def test_mean_linear_complexities_match_the_closed_forms():
    """B = 2π·N·(E K(X,X) − E K(X,X')) for attention and 3d(N+1)(1 − 2κ(1/2)) for the MLP, to O(1/d²)."""
    dim, keys = 16, 16
    attention = rb.kernel_spectrum("attention-zero", dim, keys)
    ridges, errors, complexities = rb.tikhonov_path(*rb.target_spectrum("mean-linear", "attention-zero", dim, keys))
    assert complexities[0] == pytest.approx(2 * math.pi * keys * attention.feature_norm, rel=0.01)
    ridges, errors, complexities = rb.tikhonov_path(*rb.target_spectrum("mean-linear", "mlp", dim, keys))
    assert complexities[0] == pytest.approx(3 * dim * (keys + 1) * (1 - 2 * rb.arccos_kernel(0.5)), rel=0.01)
    assert errors[0] < 1e-5 and errors[-1] > 0.99  # the path runs from the fit to predicting the mean


@pytest.mark.parametrize("name, floor", [("mean-power-3", 0.3), ("correlation-tanh", 0.025)])
def test_no_width_of_zero_mean_attention_goes_below_the_unreachable_part(name, floor):
    """The spectrum says these parts have eigenvalue 0; a finite width measured at any n cannot beat it."""
    energies, eigenvalues, norm, unreachable = rb.target_spectrum(name, "attention-zero", 16, 16)
    predicted = rb.tikhonov_path(energies, eigenvalues, norm, unreachable)[1].min()
    assert predicted > floor
    target = mhalearn.make_random_feature_target(name, 16, rng=0)
    measured = rb.width_floor(make_model("attention-zero", 48, 16, 0), [target], keys=16, samples=6000, rng=1)[name]
    assert measured > predicted - 0.02, (measured, predicted)


def test_bound_curve_is_at_most_one_and_falls_with_n():
    curve = rb.bound_curve("mean-linear", "attention-zero", 16, 16, [64, 1024, 16384])
    assert np.all(np.diff(curve) < 0) and curve[0] <= 1.0
    assert np.all(rb.bound_curve("single-key", "attention-zero", 16, 16, [64, 16384]) > 0.93)
    assert rb.complexity_at("mean-power-3", "attention-zero", 16, 16, 0.1) == math.inf


def test_identity_cheap_features_cannot_fit_the_non_invariant_control():
    target = mhalearn.make_random_feature_target("single-key", 8, rng=0)
    assert rb.identity_tier_zero(target, keys=4, samples=20_000) > 1 - 1 / 4 - 0.03
    relu = mhalearn.make_random_feature_target("correlation-relu", 8, rng=0)
    assert rb.identity_tier_zero(relu, keys=4, samples=20_000) < 0.15  # ReLU(z) is close to E ReLU(z + A)


def test_width_floor_validates_its_input():
    target = mhalearn.make_random_feature_target("mean-linear", 4, rng=0)
    with pytest.raises(ValueError, match="^samples: expected more than"):
        rb.width_floor(make_model("mlp", 4, 4, 0), [target], keys=2, samples=10)
    with pytest.raises(ValueError, match="^targets: expected"):
        rb.width_floor(make_model("mlp", 4, 4, 0), [], keys=2, samples=100)
    with pytest.raises(ValueError, match="^model: expected"):
        rb.kernel_spectrum("attention-identity", 8, 4)
