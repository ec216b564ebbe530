"""Random-feature attention, its MLP baseline, targets and experiment ([design: random-features])."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge

import mhalearn
from mhalearn.experiments import get_experiment
from mhalearn.experiments import random_features as experiment
from mhalearn.random_features import kernels, ridge
from mhalearn.random_features.targets import INVARIANT_TARGETS, RANDOM_FEATURE_TARGETS

# ----------------------------------------------------------------- references

def reference_attention_features(X, query_keys, activation="relu", value_bias=False):
    """φ_h = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) [x_j; 1], written with einsum (no Numba)."""
    query, keys = X[:, 0], X[:, 1:]
    logits = np.einsum("nd,hde,nje->nhj", query, query_keys, keys)
    weights = np.maximum(logits, 0.0) if activation == "relu" else np.tanh(logits)
    features = np.einsum("nhj,nje->nhe", weights, keys) / keys.shape[1]
    if value_bias:
        features = np.concatenate([features, weights.mean(axis=2)[:, :, None]], axis=2)
    return features.reshape(len(X), -1)


def reference_ridge(Phi, y, alpha):
    """Ridge with intercept by one dense solve of the augmented normal equations.

    Minimises ‖y − b − Φv‖² + λ‖v‖² with λ = α·‖Φ − Φ̄‖_F²/n.
    """
    n, p = Phi.shape
    penalty = alpha * np.sum((Phi - Phi.mean(axis=0)) ** 2) / n
    design = np.hstack([Phi, np.ones((n, 1))])
    regulariser = penalty * np.eye(p + 1)
    regulariser[p, p] = 0.0
    solution = np.linalg.solve(design.T @ design + regulariser, design.T @ y)
    return solution[:p], solution[p], penalty


def reference_gcv(Phi, y, alpha):
    """GCV with an explicit hat matrix of the centred problem."""
    n = len(y)
    centred = Phi - Phi.mean(axis=0)
    penalty = alpha * np.sum(centred ** 2) / n
    hat = centred @ np.linalg.solve(centred.T @ centred + penalty * np.eye(Phi.shape[1]), centred.T)
    residual = (y - y.mean()) - hat @ (y - y.mean())
    return (residual @ residual / n) / (1 - (np.trace(hat) + 1) / n) ** 2


def _sequences(rng, n=40, keys=5, dim=4):
    return mhalearn.sequence_inputs(n, keys, dim, rng=rng)


# ------------------------------------------------------------------- kernels

@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 7), keys=st.integers(1, 6), dim=st.integers(1, 6), heads=st.integers(1, 5),
       activation=st.sampled_from(["relu", "tanh"]), seed=st.integers(0, 2**32 - 1))
def test_attention_features_match_numpy_any_shape(n, keys, dim, heads, activation, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, keys + 1, dim))
    query_keys = rng.standard_normal((heads, dim, dim))
    np.testing.assert_allclose(kernels.attention_random_features(X, query_keys, activation),
                               reference_attention_features(X, query_keys, activation), rtol=1e-12, atol=1e-12)


def test_attention_features_in_several_blocks(monkeypatch, rng):
    X = rng.standard_normal((50, 4, 3))
    query_keys = rng.standard_normal((6, 3, 3))
    monkeypatch.setattr(kernels, "BLOCK_ENTRIES", 40)  # 2 samples per block
    np.testing.assert_allclose(kernels.attention_random_features(X, query_keys),
                               reference_attention_features(X, query_keys), atol=1e-12)


def test_model_features_match_numpy_with_and_without_value_bias(rng):
    X = _sequences(rng, n=30, keys=6, dim=5)
    y = rng.standard_normal(30)
    for value_bias in (True, False):
        model = mhalearn.RandomFeatureAttention(7, qk_mean="identity", value_bias=value_bias,
                                                random_state=0).fit(X, y)
        expected = reference_attention_features(X, model.query_keys_, "relu", value_bias)
        np.testing.assert_allclose(model.transform(X), expected, atol=1e-12)
        assert model.coef_.shape == (7 * (5 + value_bias),)
    # Q_h = G_h/d + I/√d: the mean over many heads is close to I/√d.
    wide = mhalearn.RandomFeatureAttention(4000, qk_mean="identity", random_state=1).fit(X, y)
    np.testing.assert_allclose(wide.query_keys_.mean(axis=0), np.eye(5) / np.sqrt(5), atol=4 * 0.2 / np.sqrt(4000))
    np.testing.assert_allclose(wide.query_keys_.std(axis=0), 0.2, rtol=0.05)


def test_mlp_features_match_numpy(rng):
    X = rng.standard_normal((25, 4, 3))
    weights = rng.standard_normal((12, 9))
    offsets = rng.standard_normal(9)
    flat = X.reshape(25, 12)
    np.testing.assert_allclose(kernels.mlp_random_features(X, weights, offsets),
                               np.maximum(flat @ weights + offsets, 0.0), atol=1e-12)
    model = mhalearn.RandomFeatureMLP(9, random_state=0).fit(X, rng.standard_normal(25))
    np.testing.assert_allclose(model.transform(X), np.maximum(flat @ model.weights_ + model.offsets_, 0.0),
                               atol=1e-12)
    assert model.weights_.shape == (12, 9) and model.offsets_.shape == (9,)
    no_bias = mhalearn.RandomFeatureMLP(9, bias=False, random_state=0).fit(X, rng.standard_normal(25))
    np.testing.assert_array_equal(no_bias.offsets_, 0.0)


# --------------------------------------------------------------------- ridge

@pytest.mark.parametrize("samples", [20, 200])  # dual (n <= p) and primal (n > p) routes
def test_ridge_matches_direct_solve_and_sklearn(samples, rng):
    X = _sequences(rng, n=samples, keys=5, dim=4)
    y = rng.standard_normal(samples)
    model = mhalearn.RandomFeatureAttention(8, alpha=0.3, random_state=2).fit(X, y)
    assert model.report_["route"] == ("dual" if samples <= 40 else "primal")
    Phi = model.transform(X)
    coef, intercept, penalty = reference_ridge(Phi, y, 0.3)
    np.testing.assert_allclose(model.coef_, coef, rtol=1e-8, atol=1e-10)
    assert model.intercept_ == pytest.approx(intercept, rel=1e-8, abs=1e-10)
    assert model.report_["penalty"] == pytest.approx(penalty, rel=1e-12)
    sklearn_fit = Ridge(alpha=penalty, solver="cholesky").fit(Phi, y)
    np.testing.assert_allclose(model.coef_, sklearn_fit.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(model.predict(X), sklearn_fit.predict(Phi), rtol=1e-8, atol=1e-9)


def test_ridge_in_blocks_matches_one_block(monkeypatch, rng):
    # Features with a large common offset test the shifted accumulation.
    Phi = 50.0 + rng.standard_normal((300, 12))
    y = 3.0 + Phi @ rng.standard_normal(12) + 0.1 * rng.standard_normal(300)
    monkeypatch.setattr(ridge, "BLOCK_ENTRIES", 12 * 7)  # 7 rows per block, 43 blocks
    coef, intercept, _, report = ridge.fit_ridge(lambda a, b: Phi[a:b].copy(), 300, 12, y, 0.01)
    expected_coef, expected_intercept, _ = reference_ridge(Phi, y, 0.01)
    assert report["route"] == "primal"
    np.testing.assert_allclose(coef, expected_coef, rtol=1e-8)
    assert intercept == pytest.approx(expected_intercept, rel=1e-8)
    no_intercept, zero, _, _ = ridge.fit_ridge(lambda a, b: Phi[a:b].copy(), 300, 12, y, 0.01, fit_intercept=False)
    penalty = 0.01 * np.sum(Phi ** 2) / 300
    np.testing.assert_allclose(no_intercept, np.linalg.solve(Phi.T @ Phi + penalty * np.eye(12), Phi.T @ y),
                               rtol=1e-8)
    assert zero == 0.0


@pytest.mark.parametrize("samples", [30, 120])
def test_gcv_picks_the_minimiser_of_explicit_gcv(samples, rng):
    X = _sequences(rng, n=samples, keys=4, dim=3)
    target = mhalearn.make_random_feature_target("correlation-relu", 3, rng=0)
    y = target(X) + 0.3 * rng.standard_normal(samples)
    alphas = (1e-3, 1e-2, 0.1, 1.0, 10.0)
    model = mhalearn.RandomFeatureAttention(12, qk_mean="identity", alpha=alphas, random_state=0).fit(X, y)
    Phi = model.transform(X)
    explicit = [reference_gcv(Phi, y, alpha) for alpha in alphas]
    np.testing.assert_allclose([model.report_["gcv"][alpha] for alpha in alphas], explicit, rtol=1e-6)
    assert model.alpha_ == alphas[int(np.argmin(explicit))]
    single = clone(model).set_params(alpha=model.alpha_).fit(X, y)
    np.testing.assert_allclose(model.coef_, single.coef_, rtol=1e-7, atol=1e-10)


def test_memory_stays_bounded_for_many_samples(monkeypatch):
    # n·p features would take 20 000 × 144 × 8 B = 23 MB; fit and predict must hold only
    # blocks of 2^16 entries (0.5 MB) of them.
    monkeypatch.setattr(ridge, "BLOCK_ENTRIES", 1 << 16)
    X = mhalearn.sequence_inputs(20_000, 8, 8, rng=0)
    y = mhalearn.make_random_feature_target("mean-linear", 8, rng=0)(X)
    model = mhalearn.RandomFeatureAttention(16, random_state=0)
    tracemalloc.start()
    try:
        model.fit(X, y)
        model.predict(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6e6, f"peak {peak / 1e6:.1f} MB"
    assert 1 - model.score(X[:2000], y[:2000]) < 0.2  # it did learn (the M = 16 floor is ≈ 0.1)


# ---------------------------------------------------------- estimator contract

def test_get_set_params_clone_and_reproducibility(rng):
    model = mhalearn.RandomFeatureAttention(5, qk_mean="identity", activation="tanh", alpha=0.5, random_state=3)
    assert model.get_params() == dict(heads=5, qk_mean="identity", activation="tanh", alpha=0.5,
                                      value_bias=True, fit_intercept=True, random_state=3)
    assert model.set_params(heads=6, alpha=2.0) is model
    assert model.heads == 6 and model.alpha == 2.0
    mlp = mhalearn.RandomFeatureMLP(10, alpha=0.1, random_state=1)
    assert mlp.get_params() == dict(features=10, alpha=0.1, bias=True, fit_intercept=True, random_state=1)
    X = _sequences(rng)
    y = rng.standard_normal(len(X))
    for estimator in (model, mlp):
        assert estimator.fit(X, y) is estimator
        twin = clone(estimator).fit(X, y)
        np.testing.assert_array_equal(twin.coef_, estimator.coef_)
        other = clone(estimator).set_params(random_state=99).fit(X, y)
        assert not np.allclose(other.coef_, estimator.coef_)
        assert not hasattr(clone(estimator), "coef_")
    assert model.values_.shape == (6, 4) and model.value_biases_.shape == (6,)
    assert model.score(X, y) == pytest.approx(1 - np.sum((model.predict(X) - y) ** 2)
                                              / np.sum((y - y.mean()) ** 2))


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError):
        mhalearn.RandomFeatureAttention(2).predict(np.zeros((1, 3, 2)))


@pytest.mark.parametrize("params, argument", [
    (dict(heads=0), "heads"), (dict(heads=2.5), "heads"), (dict(qk_mean="one"), "qk_mean"),
    (dict(activation="gelu"), "activation"), (dict(alpha=0.0), "alpha"), (dict(alpha=-1.0), "alpha"),
    (dict(alpha=[]), "alpha"), (dict(alpha=[1.0, np.nan]), "alpha"), (dict(alpha="big"), "alpha"),
    (dict(value_bias="yes"), "value_bias"), (dict(fit_intercept=1), "fit_intercept"),
    (dict(random_state="seed"), "random_state"),
])
def test_bad_hyperparameters_name_the_argument(params, argument, rng):
    X, y = _sequences(rng, n=5), np.zeros(5)
    with pytest.raises(ValueError, match=rf"^{argument}: expected .*received"):
        mhalearn.RandomFeatureAttention(**{"heads": 2, **params}).fit(X, y)


def test_bad_data_name_the_argument(rng):
    model = mhalearn.RandomFeatureAttention(2)
    X, y = _sequences(rng, n=5, dim=3), np.zeros(5)
    cases = [
        (X[:, :, 0], y, "X: expected an array of rank 3, received shape"),
        (X[:, :1], y, r"X: expected a query and at least one key.*received shape \(5, 1, 3\)"),
        (np.where(np.arange(3) == 1, np.nan, X), y, "X: expected finite values, received 30 non-finite"),
        (X, np.zeros(4), r"y: expected shape \(5,\) to match .* received shape \(4,\)"),
        (X, np.zeros((5, 1)), "y: expected an array of rank 1"),
    ]
    for bad_X, bad_y, message in cases:
        with pytest.raises(ValueError, match=message):
            model.fit(bad_X, bad_y)
    model.fit(X, y)
    with pytest.raises(ValueError, match=r"X: expected token dimension 3 as in fit, received shape \(5, 6, 4\)"):
        model.predict(np.zeros((5, 6, 4)))
    mlp = mhalearn.RandomFeatureMLP(4).fit(X, y)
    with pytest.raises(ValueError, match=r"X: expected sequences of shape \(6, 3\) as in fit"):
        mlp.predict(np.zeros((5, 7, 3)))
    with pytest.raises(ValueError, match="features: expected an integer >= 1, received 0"):
        mhalearn.RandomFeatureMLP(0).fit(X, y)
    with pytest.raises(ValueError, match="bias: expected True or False, received None"):
        mhalearn.RandomFeatureMLP(3, bias=None).fit(X, y)


# --------------------------------------------------------------- targets

def test_inputs_have_the_stated_laws():
    sphere = mhalearn.sequence_inputs(3000, 3, 6, law="sphere", rng=0)
    assert sphere.shape == (3000, 4, 6)
    np.testing.assert_allclose(np.linalg.norm(sphere, axis=2), np.sqrt(6), rtol=1e-12)
    np.testing.assert_allclose(np.cov(sphere[:, 0].T), np.eye(6), atol=0.08)  # E xxᵀ = I
    cube = mhalearn.sequence_inputs(10, 2, 5, law="boolean", rng=0)
    assert cube.shape == (10, 3, 5) and set(np.unique(cube)) == {-1.0, 1.0}
    with pytest.raises(ValueError, match="law: expected one of"):
        mhalearn.sequence_inputs(2, 2, 2, law="gaussian")
    with pytest.raises(ValueError, match="keys: expected an integer >= 1, received 0"):
        mhalearn.sequence_inputs(2, 0, 2)


def test_targets_match_their_formulas(rng):
    X = _sequences(rng, n=6, keys=3, dim=4)
    beta = np.array([0.5, -0.5, 0.5, 0.5])
    expected = {
        "mean-linear": lambda x: np.mean([x[j] @ beta for j in (1, 2, 3)]),
        "mean-power-1": lambda x: np.mean([x[0] @ x[j] / 2 for j in (1, 2, 3)]),
        "mean-power-2": lambda x: np.mean([(x[0] @ x[j] / 2) ** 2 - 1 for j in (1, 2, 3)]),
        "mean-power-3": lambda x: np.mean([(x[0] @ x[j] / 2) ** 3 for j in (1, 2, 3)]),
        "correlation-relu": lambda x: np.mean([max(x[0] @ x[j] / 2, 0) * (x[j] @ beta) for j in (1, 2, 3)]),
        "correlation-tanh": lambda x: np.mean([np.tanh(x[0] @ x[j] / 2) * (x[j] @ beta) for j in (1, 2, 3)]),
        "single-key": lambda x: x[1] @ beta,
    }
    assert set(expected) == set(RANDOM_FEATURE_TARGETS)
    for name, formula in expected.items():
        target = mhalearn.RandomFeatureTarget(name, beta)
        np.testing.assert_allclose(target(X), [formula(x) for x in X], atol=1e-12, err_msg=name)


@pytest.mark.parametrize("law", ["sphere", "boolean"])
def test_targets_are_centred_and_invariance_is_as_stated(law):
    X = mhalearn.sequence_inputs(40_000, 4, 6, law=law, rng=1)
    permuted = X[:, [0, 3, 1, 4, 2], :]
    for name in RANDOM_FEATURE_TARGETS:
        target = mhalearn.make_random_feature_target(name, 6, rng=2)
        values = target(X)
        assert abs(values.mean()) < 5 * values.std() / np.sqrt(len(values)), name
        if name in INVARIANT_TARGETS:
            np.testing.assert_allclose(target(permuted), values, atol=1e-12)
        else:
            assert np.mean((target(permuted) - values) ** 2) > 0.5 * values.var()
    with pytest.raises(ValueError, match="name: expected one of"):
        mhalearn.make_random_feature_target("cubic", 4)


def test_dataset_noise_and_validation():
    target = mhalearn.make_random_feature_target("mean-linear", 5, rng=0)
    X, y = mhalearn.make_sequence_dataset(target, 4000, 3, noise=0.5, rng=0)
    assert X.shape == (4000, 4, 5)
    assert np.std(y - target(X)) == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="noise: expected a value >= 0.0, received -1.0"):
        mhalearn.make_sequence_dataset(target, 10, 3, noise=-1.0)
    with pytest.raises(ValueError, match="target: expected a RandomFeatureTarget"):
        mhalearn.make_sequence_dataset("mean-linear", 10, 3)


# ---------------------------------------------- properties of the findings

def _error(model, target, samples, seed=0, keys=8):
    X, y = mhalearn.make_sequence_dataset(target, samples, keys, rng=seed)
    X_test, y_test = mhalearn.make_sequence_dataset(target, 2000, keys, rng=seed + 100)
    return 1 - model.fit(X, y).score(X_test, y_test)


def test_identity_mean_beats_zero_mean_on_the_correlation_target():
    target = mhalearn.make_random_feature_target("correlation-relu", 8, rng=0)
    zero = _error(mhalearn.RandomFeatureAttention(48, qk_mean="zero", alpha=0.1, random_state=0), target, 1024)
    identity = _error(mhalearn.RandomFeatureAttention(48, qk_mean="identity", alpha=0.1, random_state=0),
                      target, 1024)
    assert identity < 0.5 * zero, (identity, zero)


def test_attention_error_falls_with_n_and_beats_the_mlp_on_the_invariant_linear_target():
    target = mhalearn.make_random_feature_target("mean-linear", 8, rng=0)
    errors = [_error(mhalearn.RandomFeatureAttention(32, alpha=0.1, random_state=0), target, n)
              for n in (32, 128, 512)]
    assert errors[0] > 1.5 * errors[1] > 2.25 * errors[2], errors
    mlp = _error(mhalearn.RandomFeatureMLP(32 * 9, alpha=0.1, random_state=0), target, 128)
    assert errors[1] < 0.5 * mlp, (errors[1], mlp)


def test_mlp_learns_the_non_invariant_control_that_attention_cannot():
    target = mhalearn.make_random_feature_target("single-key", 6, rng=0)
    attention = _error(mhalearn.RandomFeatureAttention(32, alpha=0.1, random_state=0), target, 1024, keys=4)
    mlp = _error(mhalearn.RandomFeatureMLP(32 * 7, alpha=0.01, random_state=0), target, 1024, keys=4)
    assert attention > 0.6  # at best the symmetrised target: error ≥ 1 − 1/N = 0.75 in the limit
    assert mlp < 0.2


def test_value_bias_is_what_makes_the_correlation_power_learnable():
    # Without c_h every term is odd in exactly one of x_0, x_j: no fit of ⟨x_0, x_j⟩ at all.
    target = mhalearn.make_random_feature_target("mean-power-1", 8, rng=0)
    with_bias = _error(mhalearn.RandomFeatureAttention(32, qk_mean="identity", alpha=0.1, random_state=0),
                       target, 1024)
    without = _error(mhalearn.RandomFeatureAttention(32, qk_mean="identity", alpha=0.1, value_bias=False,
                                                     random_state=0), target, 1024)
    assert with_bias < 0.5
    assert without > 0.95


# -------------------------------------------------------------- experiment

def test_experiment_is_registered_and_its_grid_is_well_formed():
    registered = get_experiment("random-features")
    assert registered.run_cell is experiment.run_random_features_cell
    quick, full = registered.cells(True), registered.cells(False)
    fits = [cell for cell in quick if cell["kind"] == "fit"]
    assert len(fits) == len(RANDOM_FEATURE_TARGETS) * 3 * 3
    assert len({tuple(sorted(cell.items())) for cell in full}) == len(full)
    for cell in quick:
        assert all(isinstance(value, (str, int, float, bool)) for value in cell.values())
    assert {cell["model"] for cell in full} == set(experiment.MODEL_NAMES)
    assert len({cell["seed"] for cell in full if cell["kind"] == "fit"}) >= 5  # seeds for confidence bands
    floors = [cell for cell in full if cell["kind"] == "floor"]
    assert len({cell["heads"] for cell in floors}) >= 3
    assert all(cell["samples"] > cell["heads"] * (cell["dim"] + 1) for cell in floors)


def test_run_cell_is_deterministic_and_plot_writes_a_png(tmp_path):
    rows = []
    for model in experiment.MODEL_NAMES:
        for samples in (32, 64):
            for seed in (0, 1):
                cell = dict(kind="fit", target="correlation-relu", model=model, law="sphere", dim=6, keys=4,
                            heads=6, samples=samples, seed=seed)
                metrics = experiment.run_random_features_cell(cell)
                assert 0.0 < metrics["test_error"] < 3.0 and metrics["parameters"] == 6 * 7
                assert metrics["alpha"] in experiment.ALPHAS
                rows.append({**cell, **metrics})
        floor = dict(kind="floor", model=model, law="sphere", dim=6, keys=4, heads=3, seed=0, samples=200)
        metrics = experiment.run_random_features_cell(floor)
        assert set(metrics) == {f"floor:{name}" for name in RANDOM_FEATURE_TARGETS} | {"fit_seconds"}
        rows.append({**floor, **metrics})
    again = experiment.run_random_features_cell(dict(rows[0], **{}))
    assert again["test_error"] == rows[0]["test_error"]
    paths = experiment.plot_random_features(rows, tmp_path)
    png = [path for path in paths if path.suffix == ".png"]
    assert len(png) == 1 and png[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (tmp_path / "random-features.txt").read_text()
    assert "correlation-relu" in text and "bound n=64" in text and "floor M=3" in text
    band = experiment.error_bands([row for row in rows if row["kind"] == "fit"])[("correlation-relu", "mlp")]
    assert [point[:2] for point in band] == [(32, 2), (64, 2)]
    assert all(low <= median <= high for _, _, median, low, high in band)
    with pytest.raises(ValueError, match="rows: expected stored results"):
        experiment.plot_random_features([], tmp_path)
    with pytest.raises(ValueError, match="model: expected one of"):
        experiment.make_model("transformer", 2, 3, 0)


@pytest.mark.slow
def test_memory_and_time_at_one_hundred_thousand_samples():
    X = mhalearn.sequence_inputs(100_000, 16, 16, rng=0)
    y = mhalearn.make_random_feature_target("correlation-relu", 16, rng=0)(X)
    model = mhalearn.RandomFeatureAttention(128, qk_mean="identity", random_state=0)
    tracemalloc.start()
    try:
        model.fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    features_bytes = 100_000 * 128 * 17 * 8  # 1.7 GB if held at once
    assert peak < 0.1 * features_bytes, f"peak {peak / 1e6:.0f} MB"
    assert model.report_["route"] == "primal"
