"""K*'s tolerance under label noise: the noise estimated from the data (mhalearn.learners.chen_li.noise)."""

import numpy as np
import pytest

import mhalearn
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.learners.chen_li.noise import distinct_tokens, estimate_tolerance, label_noise, noise_tolerance


def test_distinct_tokens_counts_each_sequences_unique_rows():
    X = np.random.default_rng(0).choice([-1.0, 1.0], size=(200, 5, 2))  # 4 possible tokens: many copies
    expected = [len(np.unique(sequence, axis=0)) for sequence in X]
    np.testing.assert_array_equal(distinct_tokens(X), expected)


@pytest.mark.parametrize("sigma", [0.1, 0.3])
def test_one_head_noise_is_read_from_the_residuals(sigma):
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


@pytest.mark.parametrize("rng", [(3, 4), (7, 8)])
def test_passes_that_noise_explains_do_not_lower_the_noise(rng):
    # d = 10, σ = 0.1: the noise-free test passes one or two agreement rows by chance, about what noise
    # at the σ̂ of every row explains; their share alone would read σ̂ ≈ 0.02.
    teacher = mhalearn.sample_teacher(1, 10, rng=rng[0])
    X, Y = mhalearn.make_dataset(teacher, 5000, 4, noise=0.1, rng=rng[1])
    found = label_noise(X, Y, teacher.projection_sum, residual_tol=0.02, simplex_tol=0.02, agreement_share=1.0)
    assert found["passes"] > 0 and found["estimates"][0] < 0.05 and not found["separate"]
    assert found["noise"] == pytest.approx(0.1, rel=0.1)


def test_four_heads_without_noise_read_on_until_agreement_rows_pass():
    # Four heads: the first 25 000 sequences hold no row the noise-free test passes, and the share of 1 %
    # reads σ̂ off rows that do not agree (0.29); reading on finds agreement rows, far more than noise
    # explains, and the tolerance stays near residual_tol.
    teacher = mhalearn.sample_teacher(4, 12, rng=42)
    source = TeacherSource(teacher, 10**6, 4, seed=1)
    first = label_noise(*source.head(25_000), teacher.projection_sum, residual_tol=0.02, simplex_tol=0.02,
                        agreement_share=0.01)
    assert first["passes"] == 0 and first["noise"] > 0.2
    found = estimate_tolerance(source, teacher.projection_sum, residual_tol=0.02, simplex_tol=0.02,
                               agreement_share=0.01)
    assert found["samples"] == 100_000 and found["separate"] and found["passes"] > 100 * found["explained"]
    assert found["noise"] < 0.06 and found["tolerance"] < 0.05
    # The rows read are the stream's first: the in-memory estimate on them agrees to the bit.
    again = label_noise(*source.head(found["samples"]), teacher.projection_sum, residual_tol=0.02,
                        simplex_tol=0.02, agreement_share=0.01)
    assert again["noise"] == found["noise"] and again["passes"] == found["passes"]
