"""K*'s tolerance under label noise: the noise estimated from the data (mhalearn.learners.chen_li.noise)."""

import numpy as np
import pytest

import mhalearn
from mhalearn.learners.chen_li.noise import distinct_tokens, label_noise, noise_tolerance


def test_distinct_tokens_counts_each_sequences_unique_rows():
    X = np.random.default_rng(0).choice([-1.0, 1.0], size=(200, 5, 2))  # 4 possible tokens: many copies
    expected = [len(np.unique(sequence, axis=0)) for sequence in X]
    np.testing.assert_array_equal(distinct_tokens(X), expected)


@pytest.mark.parametrize("sigma", [0.1, 0.3])
def test_one_head_noise_is_read_from_the_residuals(sigma):
    # On this teacher the noise-free test passes no row at these σ; where it passes a few (d = 10, σ = 0.1)
    # σ̂ reads low: a limit the module documents.
    teacher = mhalearn.sample_teacher(1, 12, rng=3)
    X, Y = mhalearn.make_dataset(teacher, 5000, 4, noise=sigma, rng=4)
    found = label_noise(X, Y, teacher.projection_sum, residual_tol=0.02, simplex_tol=0.02, agreement_share=1.0)
    assert found["noise"] == pytest.approx(sigma, rel=0.1)


def test_without_noise_the_tolerance_stays_at_residual_tol():
    teacher = mhalearn.sample_teacher(1, 10, rng=3)
    X, Y = mhalearn.make_dataset(teacher, 5000, 4, rng=4)
    found = label_noise(X, Y, teacher.projection_sum, residual_tol=0.02, simplex_tol=0.02, agreement_share=1.0)
    assert found["noise"] < 1e-10
    assert noise_tolerance(found["noise"], Y, 10, 4, 0.02) == 0.02
    # At σ = 0.1 the tolerance lets through the residual of 95 % of agreement rows: far above 0.02.
    assert noise_tolerance(0.1, Y, 10, 4, 0.02) > 0.05


def test_without_noise_two_heads_keep_the_tolerance_near_residual_tol():
    # Two heads: agreement rows are about 1 % of rows; without noise σ̂ is the size of the near-agreement
    # rows' residuals, and the tolerance it gives stays within 1.5× residual_tol.
    teacher = mhalearn.sample_teacher(2, 12, rng=5)
    X, Y = mhalearn.make_dataset(teacher, 20_000, 4, rng=6)
    found = label_noise(X, Y, teacher.projection_sum, residual_tol=0.02, simplex_tol=0.02, agreement_share=0.01)
    assert found["shares"][0] is not None and found["shares"][0] < 0.02
    assert 0.02 <= noise_tolerance(found["noise"], Y, 12, 4, 0.02) < 0.03
