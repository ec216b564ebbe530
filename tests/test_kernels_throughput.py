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

    from mhalearn.data.token_codes import code_groups
    from mhalearn.learners.chen_li.sign_tables import sign_tables, token_times

    @njit
    def products(X, tables, matrix):
        out = np.empty((X.shape[0], matrix.shape[1]))
        codes = np.empty(code_groups(X.shape[1]), dtype=np.int64)
        for s in range(X.shape[0]):
            token_times(X[s], codes, tables, matrix, out[s])
        return out

    matrix = rng.standard_normal((dim, dim))
    X = mhalearn.boolean_inputs(300, 1, dim, rng=rng)[:, 0]
    X[:40] *= 0.5  # not ±1: multiplied out
    X[40:60, 0] = 0.0
    result = products(X, sign_tables(matrix), matrix)
    np.testing.assert_allclose(result, X @ matrix, rtol=0, atol=1e-12 * np.abs(matrix).sum())


@pytest.mark.parametrize("dim", [1, 5, 6, 7, 12, 13, 18])
def test_bilinear_tables_give_the_bilinear_form_of_boolean_tokens(rng, dim):
    from numba import njit

    from mhalearn.data.token_codes import code_groups, token_codes
    from mhalearn.learners.chen_li.sign_tables import bilinear_form, bilinear_tables

    @njit
    def forms(X, Z, tables):
        out = np.empty(X.shape[0])
        codes_x = np.empty(code_groups(X.shape[1]), dtype=np.int64)
        codes_z = np.empty_like(codes_x)
        for s in range(X.shape[0]):
            boolean = token_codes(X[s], codes_x) & token_codes(Z[s], codes_z)
            out[s] = bilinear_form(tables, codes_x, codes_z) if boolean else np.nan
        return out

    matrix = rng.standard_normal((dim, dim))
    X, Z = (mhalearn.boolean_inputs(300, 1, dim, rng=rng)[:, 0] for _ in range(2))
    expected = np.einsum("sa,ab,sb->s", X, matrix, Z)
    np.testing.assert_allclose(forms(X, Z, bilinear_tables(matrix)), expected, rtol=0,
                               atol=1e-12 * np.abs(matrix).sum())


def test_token_codes_name_exactly_the_boolean_tokens():
    from numba import njit

    from mhalearn.data.token_codes import BITS, code_groups, token_codes

    @njit
    def codes_of(x):
        codes = np.empty(code_groups(x.shape[0]), dtype=np.int64)
        boolean = token_codes(x, codes)
        return boolean, codes

    x = np.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0, -1.0])
    boolean, codes = codes_of(x)
    assert boolean
    bits = (x > 0).astype(int)
    assert codes.tolist() == [sum(int(bits[g * BITS + b]) << b for b in range(min(BITS, 9 - g * BITS)))
                              for g in range(2)]
    for other in (-0.0, 0.0, 1.0 + 2.0 ** -52, -1.0 - 2.0 ** -52, 2.0, 0.5, np.nan, np.inf, -np.inf, 1e-310):
        y = x.copy()
        y[4] = other
        assert not codes_of(y)[0], other


@pytest.mark.parametrize("dim", [12, 19])  # with bilinear tables and without
def test_margin_mass_floor_skips_only_rows_below_it(rng, dim):
    X = mhalearn.boolean_inputs(3000, 4, dim, rng=rng)
    X[:300, 2] = X[:300, 0]
    X[300:330] = X[300:330, :1]
    theta = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    top, mass = margin_mass(X, theta)
    floor = 0.95
    floored_top, floored = margin_mass(X, theta, floor=floor)
    skipped = np.isnan(floored)
    assert 0.1 < skipped.mean() < 0.9 and 0.1 < np.mean(mass >= floor) < 0.9  # rows on both sides
    assert np.all(mass[skipped] < floor)
    np.testing.assert_array_equal(floored[~skipped], mass[~skipped])
    np.testing.assert_array_equal(floored_top, top)
    expected_top, expected_mass = _margin_mass_reference(X, theta)
    np.testing.assert_array_equal(top, expected_top)
    np.testing.assert_allclose(mass, expected_mass, rtol=0, atol=1e-13)


@pytest.mark.parametrize("dim", [7, 12, 19])  # one group and a half, two, four (no bilinear tables)
def test_kernels_give_the_same_bits_from_the_tokens_codes(rng, dim):
    from mhalearn.data.sources import CodedTokens
    from mhalearn.data.token_codes import block_codes, code_groups
    from mhalearn.learners.chen_li.decoder import decode_patterns, decoding_residuals

    X = mhalearn.boolean_inputs(2000, 4, dim, rng=rng)
    X[:200, 3] = X[:200, 1]
    Y = rng.standard_normal(X.shape)
    codes = np.empty((2000, 4, code_groups(dim)), dtype=np.uint8)
    assert block_codes(X, codes)
    coded = CodedTokens(X, codes)
    theta, w_sum = rng.standard_normal((dim, dim)) / np.sqrt(dim), rng.standard_normal((dim, dim))
    rows = np.sort(rng.choice(2000, 700, replace=False))
    for from_codes, from_tokens in [
            (margin_mass(coded, theta, rows, floor=0.9), margin_mass(X, theta, rows, floor=0.9)),
            (decoding_residuals(coded, Y, w_sum, rows), decoding_residuals(X, Y, w_sum, rows)),
            (decode_patterns(coded, Y, w_sum), decode_patterns(X, Y, w_sum))]:
        for one, other in zip(from_codes, from_tokens):
            np.testing.assert_array_equal(one, other)


@pytest.mark.parametrize("heads, dim", [(1, 12), (3, 12), (3, 5), (3, 20), (3, 54)])
def test_the_batched_decoder_gives_the_bits_of_one_sequence_at_a_time(rng, heads, dim):
    """Residuals from the codes (LANES sequences side by side) against the tokens (one at a time): at m = 1
    every row agrees (residuals formed from the fitted point), with repeated tokens, tokens that differ in
    their first sign only (whose keys collide past d = 48), a singular Ŵ_Σ, labels scaled as they are read
    and a chunk's tail; at one, two, four and nine codes a token."""
    from mhalearn.data.sources import CodedTokens, ScaledLabels
    from mhalearn.data.token_codes import block_codes, code_groups
    from mhalearn.learners.chen_li.decoder import LANES, decode_patterns, decoding_residuals

    teacher = mhalearn.sample_teacher(heads, dim, rng=rng, condition_ceiling=np.inf)
    X = mhalearn.boolean_inputs(3 * LANES * 64 + 5, 4, dim, rng=rng)
    X[:100:3, 2] = X[:100:3, 0]
    X[200:300:5, 1] = X[200:300:5, 3]
    X[200:300:5, 1, 0] *= -1
    Y = teacher.predict(X)
    codes = np.empty((len(X), 4, code_groups(dim)), dtype=np.uint8)
    assert block_codes(X, codes)
    coded = CodedTokens(X, codes)
    rows = np.sort(rng.choice(len(X), 1000, replace=False))
    w_sum = teacher.projection_sum
    for matrix in (w_sum, w_sum + 0.01 * rng.standard_normal((dim, dim)), np.outer(w_sum[0], w_sum[1])):
        for labels in (Y, ScaledLabels(Y, 3.0)):
            # The reference: the patterns' worker, one sequence at a time, from the tokens.
            _, *one_at_a_time = decode_patterns(X, labels, matrix)
            for sequences in (None, rows):
                expected = [values if sequences is None else values[sequences] for values in one_at_a_time[:2]]
                # From the source's codes, and from the tokens (a whole block is coded by the decoder).
                for tokens in (coded, X):
                    for one, other in zip(decoding_residuals(tokens, labels, matrix, sequences), expected):
                        np.testing.assert_array_equal(one, other)
    residuals, _ = decoding_residuals(coded, Y, w_sum)
    assert heads > 1 or np.median(residuals) < 1e-6  # the rows formed from the fitted point were tested


def test_a_block_with_a_token_not_boolean_is_decoded_one_sequence_at_a_time(rng):
    """The decoder codes a whole block that comes without codes; a token with an entry other than ±1 (here
    the last sequence's) leaves it on the worker that decodes one sequence at a time: the same bits as the
    patterns' worker."""
    from mhalearn.learners.chen_li.decoder import decode_patterns, decoding_residuals

    teacher = mhalearn.sample_teacher(2, 8, rng=rng)
    X = mhalearn.boolean_inputs(200, 4, 8, rng=rng)
    X[-1, 3, 5] = 0.5
    Y = teacher.predict(X)
    _, residuals, violations, _ = decode_patterns(X, Y, teacher.projection_sum)
    one, other = decoding_residuals(X, Y, teacher.projection_sum)
    np.testing.assert_array_equal(one, residuals)
    np.testing.assert_array_equal(other, violations)


def test_unrolled_cholesky_and_solve_give_the_loops_bits(rng):
    """The decoder's k = 4 case unrolls cholesky_in_place and cholesky_solve of size 3: the same bits."""
    from numba import njit

    from mhalearn.learners.chen_li.cholesky import cholesky_in_place, cholesky_solve, cholesky_three, solve_three
    from mhalearn.learners.chen_li.decoder import _CHOLESKY_FLOOR

    @njit
    def unrolled(gram, rhs):
        factor, inverse = np.zeros((3, 3)), np.zeros(3)
        healthy = cholesky_three(gram[0, 0], gram[1, 0], gram[1, 1], gram[2, 0], gram[2, 1], gram[2, 2],
                                 _CHOLESKY_FLOOR, factor, inverse)
        solution = solve_three(factor[1, 0], factor[2, 0], factor[2, 1], inverse[0], inverse[1], inverse[2],
                                rhs[0], rhs[1], rhs[2])
        return healthy, factor, inverse, np.array(solution)

    @njit
    def looped(gram, rhs):
        factor, inverse, solution = gram.copy(), np.zeros(3), np.zeros(3)
        healthy = cholesky_in_place(factor, 3, _CHOLESKY_FLOOR)
        if healthy:
            for u in range(3):
                inverse[u] = 1.0 / factor[u, u]
            cholesky_solve(factor, inverse, 3, rhs, solution)
        return healthy, factor, inverse, solution

    checked = {True: 0, False: 0}
    for trial in range(400):
        D = rng.standard_normal((3, 12)) * rng.choice([1e-3, 1.0, 1e3])
        if trial % 4 == 0:  # rank-deficient or nearly so: the factorisation must refuse alike
            D[2] = D[0] * rng.choice([1.0, -2.0]) + (0.0 if trial % 8 == 0 else 1e-9) * D[1]
        gram, rhs = D @ D.T, rng.standard_normal(3)
        healthy, factor, inverse, solution = unrolled(gram, rhs)
        expected = looped(gram, rhs)
        assert healthy == expected[0]
        checked[healthy] += 1
        if healthy:
            lower = np.tril_indices(3)
            np.testing.assert_array_equal(factor[lower], expected[1][lower])
            np.testing.assert_array_equal(inverse, expected[2])
            np.testing.assert_array_equal(solution, expected[3])
    assert checked[True] > 200 and checked[False] > 20  # both outcomes were exercised


def test_quantile_of_finite_is_numpys_quantile_bit_for_bit(rng):
    from mhalearn.learners.order_statistics import _SAMPLE_STRIDE, quantile_of_finite

    draws = [lambda n: rng.standard_normal(n) ** 2, lambda n: np.round(rng.random(n) * 5) / 5,  # ties
             lambda n: np.exp(3 * rng.standard_normal(n)), lambda n: np.sort(rng.random(n))[::-1].copy()]
    for trial in range(1200):
        values = draws[trial % 4](int(rng.integers(1, 4000)))
        q = float(rng.choice([0.0, 1.0, 0.5, 0.1, 0.01, 0.003, 1 / 3, rng.random()]))
        result = quantile_of_finite(values.copy(), q)
        assert type(result) is float and result == np.quantile(values, q), (len(values), q)
    # A sample that misrepresents the values (every sampled value the smallest): all of them are searched.
    values = rng.random(64 * _SAMPLE_STRIDE) + 1.0
    values[::_SAMPLE_STRIDE] = 0.0
    assert quantile_of_finite(values.copy(), 0.05) == np.quantile(values, 0.05)
