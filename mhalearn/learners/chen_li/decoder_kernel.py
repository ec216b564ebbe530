"""The one-sequence kernel of the pattern decoder (:mod:`~mhalearn.learners.chen_li.decoder`).

Its worker decodes a sequence in steps: the labels read, the distinct tokens
multiplied by Ŵ_Σ (from their codes, given or coded here, or multiplied out
when a token is not Boolean), the Gram matrix of the points' differences
factored (unrolled at three free weights, k = 4 distinct tokens), the labels
projected onto the differences, then for every row its weights, residual and
distance from the simplex, and — only when asked — its pattern and spreads.
The batched worker beside the decoder's API decodes a lane alone with it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._numba import next_chunk, thread_driver
from ...data.token_codes import sequence_codes
from .cholesky import cholesky_in_place, cholesky_solve, cholesky_three, solve_three
from .sign_tables import coded_token_products, distinct_token_products

# A Cholesky pivot below this share of the largest diagonal entry marks the
# distinct tokens' rows of X Ŵ_Σ as linearly dependent (Ŵ_Σ near singular).
_CHOLESKY_FLOOR = 1e-12
# A squared residual below this share of ‖y − v_0‖², found by subtraction, keeps fewer than 12 of its
# 16 digits: it is recomputed from the fitted point (docs/benchmarks.md, "Throughput").
_EXPLICIT_BELOW = 1e-4


@njit(inline="always", cache=True)
def _read_labels(Y, sequence, label_scale, label):
    """label[:] = Y[sequence] / ``label_scale``, to the bits of NumPy's division (a copy when it is 1: dividing
    by 1 is exact, and a division costs a pass as much as the Gram matrix)."""
    if label_scale == 1.0:
        for row in range(label.shape[0]):
            for e in range(label.shape[1]):
                label[row, e] = Y[sequence, row, e]
        return
    for row in range(label.shape[0]):
        for e in range(label.shape[1]):
            label[row, e] = Y[sequence, row, e] / label_scale


@njit(inline="always", cache=True)
def _copy_shares(group, unique, count, share):
    """share[u] = 1 / the copies of distinct token u in the sequence (``count`` is scratch)."""
    count[:] = 0.0
    for j in range(group.shape[0]):
        count[group[j]] += 1.0
    for u in range(unique):
        share[u] = 1.0 if count[u] == 1.0 else 1.0 / count[u]  # a division only for copies


@njit(inline="always", cache=True)
def _factor_differences(values, free, differences, gram, inverse):
    """The rows v_u − v_0 (u = 1..``free``) of the distinct tokens' points into ``differences`` = D, the
    Cholesky factor of DDᵀ into ``gram``'s lower triangle and 1 / its diagonal into ``inverse``; whether
    DDᵀ is numerically positive definite.

    â = e_0 + Σ_{u≥1} c_u (e_u − e_0) is least squares of y − v_0 on the
    differences, which needs the points affinely independent only.  DDᵀ's
    leading 3 × 3 block (all of it at k = 4) comes in one sweep with the six
    sums side by side, any further entries one by one.
    """
    d = values.shape[1]
    for u in range(free):
        for e in range(d):
            differences[u, e] = values[u + 1, e] - values[0, e]
    paired = 3 if free >= 3 else 0
    g00 = g10 = g11 = g20 = g21 = g22 = 0.0
    if paired:
        for e in range(d):
            a, b, c = differences[0, e], differences[1, e], differences[2, e]
            g00 += a * a
            g10 += b * a
            g11 += b * b
            g20 += c * a
            g21 += c * b
            g22 += c * c
        gram[0, 0], gram[1, 1], gram[2, 2] = g00, g11, g22
        gram[1, 0] = gram[0, 1] = g10
        gram[2, 0] = gram[0, 2] = g20
        gram[2, 1] = gram[1, 2] = g21
    for u in range(paired, free):
        for v in range(u + 1):
            total = 0.0
            for e in range(d):
                total += differences[u, e] * differences[v, e]
            gram[u, v] = total
            gram[v, u] = total
    if free == 3:
        return cholesky_three(g00, g10, g11, g20, g21, g22, _CHOLESKY_FLOOR, gram, inverse)
    healthy = free == 0 or cholesky_in_place(gram, free, _CHOLESKY_FLOOR)
    if healthy:
        for u in range(free):
            inverse[u] = 1.0 / gram[u, u]
    return healthy


@njit(inline="always", cache=True)
def _weight_variances(gram, inverse, free, unique, unit, column, ones, variance):
    """Variance of each â_u per unit label noise into ``variance``: diag of (DDᵀ)⁻¹ for the free weights,
    1ᵀ(DDᵀ)⁻¹1 for the reference weight 1 − Σ c_u (``unit``, zero, and ``column`` are scratch)."""
    variance[:unique] = 0.0
    for u in range(free):
        unit[u] = 1.0
        cholesky_solve(gram, inverse, free, unit, column)
        unit[u] = 0.0
        variance[u + 1] = max(column[u], 0.0)
    if free > 0:
        cholesky_solve(gram, inverse, free, ones, column)
        total = 0.0
        for u in range(free):
            total += column[u]
        variance[0] = max(total, 0.0)


@njit(inline="always", cache=True)
def _three_factor(gram, inverse, three):
    """The factor's entries below its diagonal and 1 / its diagonal, (l10, l20, l21, i0, i1, i2), for the
    unrolled solve (:func:`~mhalearn.learners.chen_li.cholesky.solve_three`) of three free weights (k = 4
    distinct tokens, the common case): read once per sequence, held in registers over its rows.  Zeros
    when ``three`` is False: ``gram`` and ``inverse`` then hold fewer entries."""
    if three:
        return gram[1, 0], gram[2, 0], gram[2, 1], inverse[0], inverse[1], inverse[2]
    return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0


@njit(cache=True, nogil=True)
def _decode_patterns_worker(X, codes, Y, label_scale, sequences, w_sum, tables, chunks, counter, residuals,
                            violations, patterns, spreads, squares=None):
    # Output i decodes sequence sequences[i]: a pass reads a block's training sequences where they lie.
    # ``patterns`` and ``spreads`` None: residuals and violations only (the acceptance test needs no
    # more; the rows it keeps are decoded in full afterwards, with the same arithmetic, hence the
    # same bits).  Numba compiles that case apart, with the branches on them pruned away: their code
    # in the loop would cost the pass a twentieth of its time.  The branches on ``codes`` and
    # ``patterns`` stay in this function, since Numba prunes them here only, before it inlines the steps.
    # ``codes`` (n, k, groups): the codes of X's tokens, all Boolean, from the source, which
    # spare the loop coding them and reading X; None: coded here.
    # ``squares`` (n, r), when given and not empty: each row's ‖y‖², of a sequence whose residuals are finite
    # (what the candidate pass's reach test reads instead of the labels).
    # Y / ``label_scale`` are the labels decoded, divided here as each sequence's are read, to the
    # bits of NumPy's division: it costs the loop nothing measurable, where a block divided beforehand
    # costs a pass a copy of it (0.03 µs a sequence on warm memory, more on new pages).
    n = sequences.shape[0]
    k, d = X.shape[1], X.shape[2]
    labels = Y.shape[1]
    # Scratch for the largest case (k distinct tokens), allocated once per worker:
    # a dozen small allocations per sequence cost as much as the arithmetic.
    group = np.empty(k, dtype=np.int64)
    first = np.empty(k, dtype=np.int64)
    own_codes = np.empty((k, tables.shape[0]), dtype=np.int64)
    count = np.empty(k)
    values = np.empty((k, d))
    width = max(k - 1, 1)
    differences = np.empty((width, d))
    gram = np.empty((width, width))
    variance = np.empty(k)
    unit = np.zeros(width)
    column = np.empty(width)
    ones = np.ones(width)
    projections = np.empty((labels, width))  # D(y − v_0) of every row
    label_squares = np.empty(labels)  # ‖y‖² of every row
    offset_squares = np.empty(labels)  # ‖y − v_0‖² of every row
    solution = np.empty(width)
    weights = np.empty(k)
    inverse = np.empty(width)  # 1 / the Cholesky factor's diagonal
    share = np.empty(k)  # 1 / the copies of each distinct token
    label = np.empty((labels, d))  # the sequence's labels, divided by label_scale
    chunk = next_chunk(counter)
    while chunk < chunks:
        for out in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            sequence = sequences[out]
            _read_labels(Y, sequence, label_scale, label)
            # Identical tokens get identical attention: decode over distinct tokens, values[u] = x_u Ŵ_Σ.
            if codes is not None:
                unique = coded_token_products(codes[sequence], tables, group, first, values)
            elif sequence_codes(X[sequence], own_codes):
                unique = coded_token_products(own_codes, tables, group, first, values)
            else:
                unique = distinct_token_products(X[sequence], own_codes, tables, w_sum, group, first, values)
            _copy_shares(group, unique, count, share)
            free = unique - 1
            if not _factor_differences(values, free, differences, gram, inverse):
                for row in range(labels):
                    residuals[out, row] = np.inf
                    violations[out, row] = np.inf
                    if patterns is not None:
                        for j in range(k):
                            patterns[out, row, j] = np.nan
                            spreads[out, row, j] = np.inf
                continue
            if patterns is not None:
                _weight_variances(gram, inverse, free, unique, unit, column, ones, variance)
            # ‖y‖², ‖y − v_0‖² and D(y − v_0) of every row.  The sums are chains of dependent additions:
            # side by side, in one sweep, they overlap instead of waiting on each other.  Two rows at a time
            # (the first three entries of each one's D(y − v_0), the common case k = 4, in registers; any
            # further ones after): their sums share the loads of v_0 and D, and each sum keeps its own
            # order, hence its bits.
            paired = 3 if free >= 3 else 0
            for row in range(0, labels, 2):
                other = min(row + 1, labels - 1)  # the next row, or this one again when it is the last
                label_first = label_second = offset_first = offset_second = 0.0
                first_sum = second_sum = third_sum = 0.0
                first_other = second_other = third_other = 0.0
                for e in range(d):
                    offset = label[row, e] - values[0, e]
                    offset_other = label[other, e] - values[0, e]
                    offset_first += offset * offset
                    offset_second += offset_other * offset_other
                    label_first += label[row, e] ** 2
                    label_second += label[other, e] ** 2
                    if paired:
                        a, b, c = differences[0, e], differences[1, e], differences[2, e]
                        first_sum += a * offset
                        second_sum += b * offset
                        third_sum += c * offset
                        first_other += a * offset_other
                        second_other += b * offset_other
                        third_other += c * offset_other
                label_squares[row], offset_squares[row] = label_first, offset_first
                label_squares[other], offset_squares[other] = label_second, offset_second
                if paired:
                    projections[row, 0], projections[row, 1], projections[row, 2] = first_sum, second_sum, third_sum
                    projections[other, 0], projections[other, 1] = first_other, second_other
                    projections[other, 2] = third_other
            for row in range(labels):
                for u in range(paired, free):
                    total = 0.0
                    for e in range(d):
                        total += differences[u, e] * (label[row, e] - values[0, e])
                    projections[row, u] = total
            three = free == 3
            factor = _three_factor(gram, inverse, three)
            # Every row: its weights (three free weights solved unrolled, with the loops' operations in
            # their order, hence their bits), its residual, its distance from the simplex and, when asked,
            # its pattern.  This step and the last are written out here rather than as helpers: with them
            # inlined, a pass measured a tenth to a fifth slower (their array arguments add reference
            # counts on every row).
            l10, l20, l21, i0, i1, i2 = factor
            for row in range(labels):
                projected = projections[row]
                label_squared, offset_squared = label_squares[row], offset_squares[row]
                if three:
                    p0, p1, p2 = projected[0], projected[1], projected[2]
                    c0, c1, c2 = solve_three(l10, l20, l21, i0, i1, i2, p0, p1, p2)
                    weights[0] = 1.0 - c0 - c1 - c2
                    weights[1], weights[2], weights[3] = c0, c1, c2
                    explained = 0.0 + c0 * p0 + c1 * p1 + c2 * p2
                else:
                    if free > 0:
                        cholesky_solve(gram, inverse, free, projected, solution)
                    weights[0] = 1.0
                    explained = 0.0
                    for u in range(free):
                        weights[u + 1] = solution[u]
                        weights[0] -= solution[u]
                        explained += solution[u] * projected[u]
                # ‖y − v_0‖² − ‖its projection‖² is the squared residual (Pythagoras) at a third of the
                # cost; where it cancels to below _EXPLICIT_BELOW of ‖y − v_0‖² (the near-agreement rows,
                # the ones that matter) it has lost digits, and the residual is formed explicitly.
                squared = offset_squared - explained
                if squared <= _EXPLICIT_BELOW * offset_squared:
                    squared = 0.0
                    for e in range(d):
                        fitted = 0.0
                        for u in range(unique):
                            fitted += weights[u] * values[u, e]
                        squared += (fitted - label[row, e]) ** 2
                residuals[out, row] = np.sqrt(squared / label_squared) if label_squared > 0.0 else np.inf
                violation = 0.0  # max(0, −min â_j, max â_j − 1), a distinct token's weight shared by its copies
                for u in range(unique):
                    weight = weights[u] * share[u]
                    violation = max(violation, -weight, weight - 1.0)
                violations[out, row] = violation
                if squares is not None:  # alone, so that Numba prunes it where squares is None
                    if squares.shape[0]:
                        squares[out, row] = label_squared
                if patterns is not None:
                    noise = np.sqrt(squared / max(d - free, 1))
                    for j in range(k):
                        u = group[j]
                        patterns[out, row, j] = weights[u] * share[u]
                        spreads[out, row, j] = noise * np.sqrt(variance[u]) * share[u]
        chunk = next_chunk(counter)


_decode_patterns_parallel = thread_driver(_decode_patterns_worker)
