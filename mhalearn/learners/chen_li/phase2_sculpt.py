"""Phase 2 of Chen & Li's learner: sculpt the body — find the agreement rows and turn them into slabs.

A query row ℓ of a sequence X is an *agreement row* when every head gives it
the same attention pattern a (of any shape).  Then its label is

    y_ℓ = Σ_i a_iᵀ X W_i = aᵀ X W_Σ,        W_Σ = Σ_i W_i,

so y_ℓ lies on the affine hull of the k points x_j W_Σ.  With an estimate
Ŵ_Σ every row is *decoded* by least squares under Σ_j â_j = 1,

    â = argmin ‖âᵀ X Ŵ_Σ − y_ℓ‖   subject to  1ᵀâ = 1,

in closed form (one (k−1)×(k−1) Cholesky factorisation per sequence, shared
by its k rows; :func:`decode_patterns`, a Numba kernel run by the dispatcher of
:mod:`mhalearn._numba`).  A small relative residual
and an â close to the simplex flag an agreement row.  The test needs d > k:
at d ≤ k the k points x_j Ŵ_Σ span an affine set of dimension k − 1 ≥ d − 1
and residuals carry almost no information (docs/design.md §4.1, step 2).

On an agreement row the log-ratios of the pattern are linear in every Θ_i:

    log(a_j / a_{j₀}) = ⟨x_ℓ (x_j − x_{j₀})ᵀ, Θ_i⟩     for every head i,

so each accepted row gives *slabs* ``|⟨C, Θ⟩ − log(â_j/â_{j₀})| ≤ t_j`` for the
tokens with â_j ≥ w_min (j₀ the top token, t_j from the decoding's
uncertainty σ_j: t_j = κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + t_min) and one-sided
constraints ⟨C, Θ⟩ ≤ log((w_min + κσ_j)/(â_{j₀} − κσ_{j₀})) for the negligible
tokens.  Every Θ_i satisfies them, and so does every affine combination of the
Θ_i: their intersection is long along aff{Θ_i} and thin across it
(:mod:`mhalearn.learners.chen_li.body`).

:func:`sculpt_body` is the phase: one pass that decodes every row with Ŵ_Σ,
accepts the agreement rows and returns their slabs.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numba import njit

from ..._numba import DISPATCH, chunk_count, new_counter, next_chunk, thread_driver
from ...seeding import draw_seed
from ..report import PhaseResult, data_field
from ..streams import CodedTokens, kernel_labels, stream_rows
from .cholesky import cholesky_in_place
from .sign_tables import block_codes, code_groups, sequence_codes, sign_tables, table_times, token_times
from .settings import BodySettings

# ---------------------------------------------------------------- decoding

# A Cholesky pivot below this share of the largest diagonal entry marks the
# distinct tokens' rows of X Ŵ_Σ as linearly dependent (Ŵ_Σ near singular).
_CHOLESKY_FLOOR = 1e-12
# A squared residual below this share of ‖y − v_0‖², found by subtraction, keeps fewer than 12 of its
# 16 digits: it is recomputed from the fitted point (docs/benchmarks.md, "Throughput").
_EXPLICIT_BELOW = 1e-4
# The pool's bound on a residual under a new Ŵ_Σ is shrunk by this share for the decoder's rounding: its
# residuals above 1 % of ‖y − v_0‖ (every one a bound can rule out) keep 6 digits while the 3 × 3 Gram
# matrix's condition number is below 10⁶ (Boolean tokens and a Ŵ_Σ of condition ~10² stay far below).
_BOUND_SLACK = 1e-6


@njit(inline="always", cache=True)
def group_identical_tokens(x, group, first):
    """Number the distinct tokens of one sequence ``x`` (k, d) in order of first appearance.

    Writes group[j] = the number of token j's class and first[u] = the first
    token of class u; returns the number of classes.  Identical tokens get
    identical logits under every Θ, so the kernels treat each class as one token.
    ``x`` may also be the codes of Boolean tokens (k, groups): equal tokens have equal codes.
    """
    k, d = x.shape
    unique = 0
    for j in range(k):
        group[j] = -1
        for u in range(unique):
            # Count every mismatch rather than stop at the first: random tokens differ early and
            # unpredictably, and the branch mispredictions cost more than the comparisons.
            mismatches = 0
            for e in range(d):
                mismatches += x[first[u], e] != x[j, e]
            if mismatches == 0:
                group[j] = u
                break
        if group[j] < 0:
            group[j] = unique
            first[unique] = j
            unique += 1
    return unique


@njit(inline="always", cache=True)
def coded_token_products(codes, tables, group, first, values):
    """:func:`group_identical_tokens` of Boolean tokens given by their ``codes`` (k, groups), and x_u M for
    the first token of every class into ``values`` from ``tables`` = sign_tables(M); returns the classes."""
    unique = group_identical_tokens(codes, group, first)
    for u in range(unique):
        table_times(tables, codes[first[u]], values[u])
    return unique


@njit(cache=True, nogil=True)
def distinct_token_products(x, codes, tables, matrix, group, first, values):
    """The classes of identical tokens of ``x`` (k, d) (:func:`group_identical_tokens`) and x_u M for the
    first token of every class into ``values``; returns the number of classes.

    The kernels' path for a sequence with a token that is not Boolean, and not inlined: its code,
    in the loop of the Boolean path, would cost that path a tenth of its time.
    """
    unique = group_identical_tokens(x, group, first)
    for u in range(unique):
        token_times(x[first[u]], codes[first[u]], tables, matrix, values[u])
    return unique


@njit(inline="always", cache=True)
def _cholesky_solve(L, inverse, size, rhs, out):
    """Solve (L Lᵀ) out = rhs for the leading ``size`` entries; ``inverse`` holds 1 / L[j, j].

    Multiplying by the reciprocals keeps the divisions, whose latency the
    substitutions would chain, out of the per-row loop.
    """
    for j in range(size):
        value = rhs[j]
        for t in range(j):
            value -= L[j, t] * out[t]
        out[j] = value * inverse[j]
    for j in range(size - 1, -1, -1):
        value = out[j]
        for t in range(j + 1, size):
            value -= L[t, j] * out[t]
        out[j] = value * inverse[j]


@njit(inline="always", cache=True)
def _cholesky_three(g00, g10, g11, g20, g21, g22, factor, inverse):
    """cholesky_in_place of the 3 × 3 Gram matrix [[g00, g10, g20], [g10, g11, g21], [g20, g21, g22]] into
    ``factor``'s lower triangle, and 1 / its diagonal into ``inverse``; whether it succeeded.

    Its operations in its order, hence its bits, unrolled: the decoder's common case (k = 4 distinct
    tokens), whose loops over three entries cost more than their arithmetic.
    """
    bound = _CHOLESKY_FLOOR * max(max(max(0.0, g00), g11), g22)
    if g00 <= bound:
        return False
    l00 = np.sqrt(g00)
    l10, l20 = g10 / l00, g20 / l00
    pivot = g11 - l10 * l10
    if pivot <= bound:
        return False
    l11 = np.sqrt(pivot)
    l21 = (g21 - l20 * l10) / l11
    pivot = g22 - l20 * l20 - l21 * l21
    if pivot <= bound:
        return False
    l22 = np.sqrt(pivot)
    factor[0, 0], factor[1, 1], factor[2, 2] = l00, l11, l22
    factor[1, 0], factor[2, 0], factor[2, 1] = l10, l20, l21
    inverse[0], inverse[1], inverse[2] = 1.0 / l00, 1.0 / l11, 1.0 / l22
    return True


@njit(inline="always", cache=True)
def _solve_three(l10, l20, l21, i0, i1, i2, p0, p1, p2):
    """:func:`_cholesky_solve` of size 3, unrolled: (L Lᵀ) c = p for L = [[·, 0, 0], [l10, ·, 0], [l20, l21, ·]]
    with 1 / its diagonal (i0, i1, i2); its operations in its order, hence its bits."""
    forward0 = p0 * i0
    forward1 = (p1 - l10 * forward0) * i1
    forward2 = (p2 - l20 * forward0 - l21 * forward1) * i2
    c2 = forward2 * i2
    c1 = (forward1 - l21 * c2) * i1
    c0 = (forward0 - l10 * c1 - l20 * c2) * i0
    return c0, c1, c2


@njit(cache=True, nogil=True)
def _decode_patterns_worker(X, codes, Y, label_scale, rows, w_sum, tables, chunks, counter, residuals, violations,
                            patterns, spreads):
    # ``patterns`` and ``spreads`` None: residuals and violations only (the acceptance test needs no
    # more; the rows it keeps are decoded in full afterwards, with the same arithmetic, hence the
    # same bits).  Numba compiles that case apart, with the branches on them pruned away: their code
    # in the loop would cost the pass a twentieth of its time.
    # Output i decodes sequence rows[i]: a pass reads a block's training rows where they lie.
    # ``codes`` (n, k, groups): the codes of X's tokens, all Boolean, from the source, which
    # spare the loop coding them and reading X; None: coded here.
    # Y / ``label_scale`` are the labels decoded, divided here as each sequence's are read, to the
    # bits of NumPy's division: it costs the loop nothing measurable, where a block divided beforehand
    # costs a pass a copy of it (0.03 µs a sequence on warm memory, more on new pages).
    n = rows.shape[0]
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
            s = rows[out]
            for row in range(labels):
                for e in range(d):
                    label[row, e] = Y[s, row, e] / label_scale
            # Identical tokens get identical attention: decode over distinct tokens.
            if codes is not None:  # x_u Ŵ_Σ
                unique = coded_token_products(codes[s], tables, group, first, values)
            elif sequence_codes(X[s], own_codes):
                unique = coded_token_products(own_codes, tables, group, first, values)
            else:
                unique = distinct_token_products(X[s], own_codes, tables, w_sum, group, first, values)
            count[:] = 0.0
            for j in range(k):
                count[group[j]] += 1.0
            for u in range(unique):
                share[u] = 1.0 if count[u] == 1.0 else 1.0 / count[u]  # a division only for copies
            # â = e_0 + Σ_{u≥1} c_u (e_u − e_0): least squares of y − v_0 on the
            # differences v_u − v_0, which needs the points affinely independent only.
            free = unique - 1
            for u in range(free):
                for e in range(d):
                    differences[u, e] = values[u + 1, e] - values[0, e]
            # DDᵀ: its leading 3 × 3 block (all of it at k = 4) in one sweep with the six sums side
            # by side (see the rows below), any further entries one by one.
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
                healthy = _cholesky_three(g00, g10, g11, g20, g21, g22, gram, inverse)
            else:
                healthy = free == 0 or cholesky_in_place(gram, free, _CHOLESKY_FLOOR)
                if healthy:
                    for u in range(free):
                        inverse[u] = 1.0 / gram[u, u]
            if not healthy:
                for row in range(labels):
                    residuals[out, row] = np.inf
                    violations[out, row] = np.inf
                    if patterns is not None:
                        for j in range(k):
                            patterns[out, row, j] = np.nan
                            spreads[out, row, j] = np.inf
                continue
            # Variance of each â_u per unit label noise: diag of (DDᵀ)⁻¹ for the
            # free weights, 1ᵀ(DDᵀ)⁻¹1 for the reference weight 1 − Σ c_u.
            variance[:unique] = 0.0
            if patterns is not None:
                for u in range(free):
                    unit[u] = 1.0
                    _cholesky_solve(gram, inverse, free, unit, column)
                    unit[u] = 0.0
                    variance[u + 1] = max(column[u], 0.0)
                if free > 0:
                    _cholesky_solve(gram, inverse, free, ones, column)
                    total = 0.0
                    for u in range(free):
                        total += column[u]
                    variance[0] = max(total, 0.0)
            degrees = max(d - free, 1)
            # The sums are chains of dependent additions: side by side, in one sweep, they overlap
            # instead of waiting on each other.  Two rows at a time (the first three entries of each
            # one's D(y − v_0), the common case k = 4, in registers; any further ones after): their
            # sums share the loads of v_0 and D, and each sum keeps its own order, hence its bits.
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
            # Three free weights (k = 4 distinct tokens, the common case): the factor and its inverse
            # diagonal in registers, and every row's solve unrolled (_solve_three), as the weights'
            # updates below are: the same operations in the same order as the loops, hence the same bits.
            three = free == 3
            l10 = l20 = l21 = i0 = i1 = i2 = 0.0
            if three:  # (below three free weights, gram and inverse hold fewer entries than these)
                l10, l20, l21 = gram[1, 0], gram[2, 0], gram[2, 1]
                i0, i1, i2 = inverse[0], inverse[1], inverse[2]
            for row in range(labels):
                projected = projections[row]
                label_squared, offset_squared = label_squares[row], offset_squares[row]
                if three:
                    p0, p1, p2 = projected[0], projected[1], projected[2]
                    c0, c1, c2 = _solve_three(l10, l20, l21, i0, i1, i2, p0, p1, p2)
                    weights[0] = 1.0 - c0 - c1 - c2
                    weights[1], weights[2], weights[3] = c0, c1, c2
                    explained = 0.0 + c0 * p0 + c1 * p1 + c2 * p2
                else:
                    if free > 0:
                        _cholesky_solve(gram, inverse, free, projected, solution)
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
                violation = 0.0
                for u in range(unique):
                    weight = weights[u] * share[u]
                    violation = max(violation, -weight, weight - 1.0)
                violations[out, row] = violation
                if patterns is not None:
                    noise = np.sqrt(squared / degrees)
                    for j in range(k):
                        u = group[j]
                        patterns[out, row, j] = weights[u] * share[u]
                        spreads[out, row, j] = noise * np.sqrt(variance[u]) * share[u]
        chunk = next_chunk(counter)


_decode_patterns_parallel = thread_driver(_decode_patterns_worker)


def decode_patterns(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray):
    """Decode the attention pattern of labelled rows with Ŵ_Σ (affine least squares).

    Parameters
    ----------
    X : (n, k, d) sequences.
    Y : (n, r, d) output rows to decode against each sequence (r = k for
        every row of a sequence, r = 1 for one chosen row).
    w_sum : (d, d) the estimate Ŵ_Σ.

    Returns
    -------
    patterns : (n, r, k) — â of each row; identical tokens share their weight
        equally; NaN when the points x_j Ŵ_Σ of distinct tokens are affinely
        dependent.
    residuals : (n, r) — relative residual ‖âᵀ X Ŵ_Σ − y‖ / ‖y‖ (inf when
        affinely dependent or y = 0).
    violations : (n, r) — distance of â from the simplex, max(0, −min â_j, max â_j − 1).
    spreads : (n, r, k) — σ_j, the standard deviation of â_j if the residual
        were white noise of the same size: ‖residual‖/√(d − k + 1) times the
        square root of â_j's variance per unit noise.
    """
    return _decode(X, Y, w_sum, full=True)


def decoding_residuals(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray,
                       rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``residuals`` and ``violations`` of :func:`decode_patterns`, bit for bit, without the patterns.

    What the acceptance test of every row needs: it skips the spreads'
    solves and the (n, r, k) outputs, so a pass over the data decodes in
    full only the rows it keeps.  ``rows`` (sorted indices into X and Y)
    decodes those sequences only, where they lie, and indexes the outputs
    by position in ``rows``: a block's training rows without gathering them.
    """
    _, residuals, violations, _ = _decode(X, Y, w_sum, full=False, rows=rows)
    return residuals, violations


def _decode(X, Y, w_sum, *, full: bool, rows: np.ndarray | None = None):
    k = X.shape[1]
    rows = stream_rows(rows, X.shape[0])
    n = len(rows)
    labels = Y.shape[1]
    patterns, spreads = (np.empty((n, labels, k)), np.empty((n, labels, k))) if full else (None, None)
    residuals = np.empty((n, labels))
    violations = np.empty((n, labels))
    codes = getattr(X, "codes", None)  # a CodedTokens block (mhalearn.learners.streams)
    Y, label_scale = kernel_labels(Y)
    X = np.ascontiguousarray(X)
    w_sum = np.ascontiguousarray(w_sum, dtype=np.float64)
    d = X.shape[2]
    chunks = chunk_count(n)
    DISPATCH.run("decode_patterns", n * k * d * (d + k + labels), _decode_patterns_worker,
                 _decode_patterns_parallel, X, codes, Y, label_scale, rows, w_sum, sign_tables(w_sum), chunks,
                 new_counter(), residuals, violations, patterns, spreads)
    return patterns, residuals, violations, spreads


# ---------------------------------------------------------------- acceptance

@dataclass
class AgreementRows:
    """Labelled rows with their decoded patterns: candidates or accepted agreement rows.

    Attributes
    ----------
    tokens : (c, k, d) the sequence of each row.
    query : (c,) its row index ℓ.
    label : (c, d) the output row y_ℓ.
    pattern : (c, k) the decoded pattern â.
    spread : (c, k) the decoding's standard deviations σ_j.
    residual : (c,) relative residual ‖âᵀXŴ_Σ − y_ℓ‖ / ‖y_ℓ‖.
    violation : (c,) distance of â from the simplex.
    scanned : rows decoded to find these.
    found : rows that passed the test, before any cap on the rows kept
        (``len(self)`` when nothing was capped).
    """

    tokens: np.ndarray
    query: np.ndarray
    label: np.ndarray
    pattern: np.ndarray
    spread: np.ndarray
    residual: np.ndarray
    violation: np.ndarray
    scanned: int
    found: int | None = None
    # The tokens' codes, coded on first use (None: not yet; False: a token is not Boolean).
    _codes: np.ndarray | bool | None = field(default=None, init=False, repr=False, compare=False)
    # What best_under last decoded: each row's residual and the Ŵ_Σ it was decoded under (None: nothing yet).
    _redecoding: "_Redecoding | None" = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.found is None:
            self.found = len(self.query)

    def coded_tokens(self):
        """The tokens with their codes (:class:`~mhalearn.learners.streams.CodedTokens`) when every one is
        Boolean, else the tokens: coded once, since our refit decodes its pool again at every iteration."""
        if self._codes is None:
            codes = np.empty((*self.tokens.shape[:2], code_groups(self.tokens.shape[2])), dtype=np.uint8)
            self._codes = codes if block_codes(self.tokens, codes) else False
        return self.tokens if self._codes is False else CodedTokens(self.tokens, self._codes)

    def __len__(self) -> int:
        return len(self.query)

    @property
    def fraction(self) -> float:
        """Share of the decoded rows that passed the test (before any cap)."""
        return self.found / self.scanned if self.scanned else 0.0

    def subset(self, keep) -> "AgreementRows":
        """The rows selected by ``keep`` (mask or indices); ``scanned`` is kept."""
        return AgreementRows(self.tokens[keep], self.query[keep], self.label[keep], self.pattern[keep],
                             self.spread[keep], self.residual[keep], self.violation[keep], self.scanned)

    def redecode(self, w_sum: np.ndarray) -> "AgreementRows":
        """The same rows decoded again with another Ŵ_Σ."""
        return decoded_rows(self.tokens, self.query, self.label, w_sum, self.scanned)

    def best_under(self, w_sum: np.ndarray, count: int, *, simplex_tol: float = 0.02) -> "AgreementRows":
        """``self.redecode(w_sum).best(count)``, bit for bit, with only the rows that can be chosen decoded.

        The ranking needs each row's residual and violation alone
        (:func:`decoding_residuals`), and only for the rows that a bound from
        their last decoding does not rule out (:class:`_Redecoding`): called
        again and again under a Ŵ_Σ that moves less and less, as our refit
        does, it decodes a shrinking share of the rows.  The patterns and
        spreads are computed for the ``count`` rows kept.
        """
        if self._redecoding is None:
            self._redecoding = _Redecoding(self)
        residuals, violations = self._redecoding.residuals_under(self.coded_tokens(), self.label, w_sum, count,
                                                                 simplex_tol)
        keep = best_rows(residuals, violations, count, simplex_tol)
        return decoded_rows(self.tokens[keep], self.query[keep], self.label[keep], w_sum, self.scanned)

    def accept(self, *, quantile: float | None = None, residual_tol: float | None = None,
               simplex_tol: float = 0.02) -> "AgreementRows":
        """Rows within ``simplex_tol`` of the simplex whose relative residual is at
        most the ``quantile`` of those rows' residuals (capped by ``residual_tol``
        when both are given) or at most ``residual_tol``."""
        return self.subset(_accepted(self.residual, self.violation, quantile, residual_tol, simplex_tol)[0])

    def best(self, count: int, *, simplex_tol: float = 0.02) -> "AgreementRows":
        """The ``count`` rows within ``simplex_tol`` of the simplex with the smallest relative residuals."""
        return self.subset(best_rows(self.residual, self.violation, count, simplex_tol))

    def mixed_tokens(self) -> np.ndarray:
        """âᵀ X for every row, shape (c, d): y_ℓ = (âᵀX) W_Σ on a true agreement row."""
        return np.einsum("cj,cjd->cd", self.pattern, self.tokens)

    def queries(self) -> np.ndarray:
        """The query token x_ℓ of every row, shape (c, d)."""
        return self.tokens[np.arange(len(self)), self.query]


class _Redecoding:
    """Which rows of a pool must be decoded again under a new Ŵ_Σ for its best ``count`` to be exact.

    A row's relative residual cannot fall much when Ŵ_Σ moves.  Let â' be
    its decoding under Ŵ'_Σ, within ``simplex_tol`` = τ of the simplex (else
    the row cannot be chosen), so ‖â'‖₁ ≤ 1 + 2kτ = A.  The residual under
    Ŵ_Σ is a minimum over affine weights, â' among them:

        r(Ŵ_Σ)‖y‖ ≤ ‖â'ᵀXŴ_Σ − y‖ ≤ r(Ŵ'_Σ)‖y‖ + A · max_j ‖x_j‖ · ‖Ŵ_Σ − Ŵ'_Σ‖₂,

    so r(Ŵ'_Σ) ≥ r(Ŵ_Σ) − A · max_j ‖x_j‖ · ‖Ŵ_Σ − Ŵ'_Σ‖₂ / ‖y‖, with Ŵ_Σ
    the estimate the row was last decoded under.  A row whose bound exceeds
    the ``count``-th smallest residual among decoded rows cannot be among
    the best ``count``, and is not decoded; it keeps its last residual and
    the estimate it was decoded under.  The rows are decoded in bands of
    rising bound, the first up to the last call's ``count``-th residual (it
    falls slowly as Ŵ_Σ converges), until that residual is below every
    undecoded row's bound.  Rows whose last residual is not finite (a
    degenerate decoding, y = 0) are always decoded.  The bound is shrunk by
    a relative ``_BOUND_SLACK`` for the decoder's rounding.
    """

    def __init__(self, rows: AgreementRows):
        self.residual = np.full(len(rows), np.inf)
        self.decoded_at = np.full(len(rows), -1)  # the call that last decoded each row (-1: none)
        self.estimates = []  # Ŵ_Σ of every call
        self.threshold, self.decoded = -np.inf, 0  # the last call's count-th residual, and its rows decoded
        label_norm = np.sqrt(np.einsum("cd,cd->c", rows.label, rows.label))  # a quarter of norm's time
        token_norm = np.sqrt(np.einsum("ckd,ckd->ck", rows.tokens, rows.tokens).max(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            self.reach = token_norm / label_norm  # times A: how far the residual can fall per unit ‖ΔŴ_Σ‖₂
        self.length = rows.tokens.shape[1]

    def residuals_under(self, tokens, labels: np.ndarray, w_sum: np.ndarray, count: int, simplex_tol: float):
        """Residuals and violations under ``w_sum``: decoded for the rows that may be among the best
        ``count``, +inf and 0 for the rows ruled out (they can never be chosen)."""
        moves = np.full(len(self.estimates) + 1, np.inf)  # by the call that last decoded a row; none: the last
        for call in np.unique(self.decoded_at[self.decoded_at >= 0]):
            moves[call] = np.linalg.norm(w_sum - self.estimates[call], 2)
        moves *= 1.0 + 2.0 * self.length * simplex_tol  # A
        with np.errstate(invalid="ignore"):  # inf · 0, inf − inf: no bound
            bound = self.residual - self.reach * moves[self.decoded_at]
        bound = np.where(np.isfinite(bound), bound * (1.0 - _BOUND_SLACK), -np.inf)
        residuals, violations = np.full(len(bound), np.inf), np.zeros(len(bound))
        undecoded = np.ones(len(bound), dtype=bool)
        limit = self.threshold
        while True:
            band = np.flatnonzero(undecoded & (bound <= limit))
            if len(band):
                found, violated = decoding_residuals(tokens, labels[:, None, :], w_sum, band)
                residuals[band], violations[band] = found[:, 0], violated[:, 0]
                undecoded[band] = False
            chosen = best_rows(residuals, violations, count, simplex_tol)
            threshold = residuals[chosen].max() if len(chosen) == count and count > 0 else np.inf
            if threshold <= limit or not undecoded.any():
                break
            limit = threshold
        decoded = ~undecoded
        self.residual[decoded], self.decoded_at[decoded] = residuals[decoded], len(self.estimates)
        self.estimates.append(w_sum)
        self.threshold, self.decoded = threshold, int(np.count_nonzero(decoded))
        return residuals, violations


def decoded_rows(tokens: np.ndarray, query: np.ndarray, label: np.ndarray, w_sum: np.ndarray, scanned: int,
                 found: int | None = None) -> AgreementRows:
    """The rows (``tokens``, ``query``, ``label``) decoded with Ŵ_Σ (:func:`decode_patterns`), as AgreementRows."""
    patterns, residuals, violations, spreads = decode_patterns(tokens, label[:, None, :], w_sum)
    return AgreementRows(tokens, query, label, patterns[:, 0], spreads[:, 0], residuals[:, 0], violations[:, 0],
                         scanned, found)


def best_rows(residual: np.ndarray, violation: np.ndarray, count: int, simplex_tol: float) -> np.ndarray:
    """Indices, ascending, of the ``count`` rows within ``simplex_tol`` of the simplex with the smallest residuals."""
    usable = np.flatnonzero((violation <= simplex_tol) & np.isfinite(residual))
    if len(usable) <= count:
        return usable
    if count <= 0:
        return usable[:0]
    # The rows a stable sort by residual would put first, found without sorting: those below the
    # count-th smallest residual, then as many rows equal to it as fit, in index order.
    values = residual[usable]
    kth = np.partition(values, count - 1)[count - 1]
    keep = values < kth
    keep[np.flatnonzero(values == kth)[:count - np.count_nonzero(keep)]] = True
    return usable[keep]


#: The sample of :func:`_adjacent_order_statistics`: every SAMPLE_STRIDE-th value.
_SAMPLE_STRIDE = 64


def quantile_of_finite(values: np.ndarray, q: float) -> float:
    """``np.quantile(values, q)`` (its default, linear method), bit for bit, for finite ``values``; may reorder them.

    NumPy partitions the whole array around four ranks (the two it
    interpolates, the first and the last).  A pass's quantile is low (the
    best share of a block), so the two order statistics are found among the
    few values below a bound read off a sample (:func:`_adjacent_order_statistics`),
    and interpolated with NumPy's own formula: on a block's 262 144 residuals,
    0.4 of NumPy's time at a share of 0.1 and a tenth at 0.005.
    """
    count = len(values)
    position = (count - 1) * q  # NumPy's virtual index, and its arithmetic below
    rank = math.floor(position)
    if count < 2 or position >= count - 1 or (rank + 2) * 8 > count:  # not a low quantile: NumPy's
        return float(np.quantile(values, q, overwrite_input=True))
    below, above = _adjacent_order_statistics(values, rank, _SAMPLE_STRIDE)
    gamma = position - rank
    difference = above - below
    if gamma >= 0.5:
        return float(above - difference * (1 - gamma))
    return float(below + difference * gamma)


def _adjacent_order_statistics(values: np.ndarray, rank: int, stride: int) -> tuple[float, float]:
    """The ``rank``-th and next smallest of ``values`` (finite; 0-based; rank + 2 ≤ their count).

    Every ``stride``-th value is sorted, and the one a few standard
    deviations past rank + 2 of the whole, scaled to the sample, bounds the
    values searched; when fewer than rank + 2 lie below it (a sample that
    happens to be unrepresentative), every value is searched.  Either way
    the result is exact: the order statistics are those of all the values.
    """
    sample = np.sort(values[::stride])
    expected = (rank + 2) / stride
    bound = sample[min(int(expected + 3.0 * math.sqrt(expected)) + 8, len(sample) - 1)]
    low = values[values <= bound]
    if len(low) < rank + 2:
        low = values
    low = np.partition(low, rank)
    return low[rank], low[rank + 1:].min()


def _accepted(residual, violation, quantile, residual_tol, simplex_tol) -> tuple[np.ndarray, ...]:
    """The entries that pass the acceptance rule shared by blocks and pools, as ``np.nonzero`` gives them.

    Usable entries are within ``simplex_tol`` of the simplex with a finite
    residual; of those, the ones with a residual at most the ``quantile`` of
    the usable residuals (capped by ``residual_tol``) or at most ``residual_tol``.
    """
    if quantile is None and residual_tol is None:
        raise ValueError("agreement rows: give a quantile, a residual_tol or both")
    flat_residual = np.ascontiguousarray(residual).reshape(-1)
    flat_violation = np.ascontiguousarray(violation).reshape(-1)
    threshold = np.inf
    if quantile is not None:
        usable = _entries_within(flat_residual, flat_violation, simplex_tol, np.inf)
        if len(usable) == 0:
            return np.nonzero(np.zeros(residual.shape, dtype=bool))
        threshold = quantile_of_finite(flat_residual[usable], quantile)
    if residual_tol is not None:
        threshold = min(threshold, residual_tol)
    return np.unravel_index(_entries_within(flat_residual, flat_violation, simplex_tol, threshold), residual.shape)


@njit(cache=True)
def _entries_within(residual, violation, simplex_tol, threshold):
    """Ascending indices of the entries within ``simplex_tol`` of the simplex with a finite residual at most
    ``threshold`` (one read of each array, no temporary masks)."""
    count = 0
    for at in range(residual.shape[0]):
        count += (violation[at] <= simplex_tol) & np.isfinite(residual[at]) & (residual[at] <= threshold)
    entries = np.empty(count, dtype=np.int64)
    count = 0
    for at in range(residual.shape[0]):
        if (violation[at] <= simplex_tol) & np.isfinite(residual[at]) & (residual[at] <= threshold):
            entries[count] = at
            count += 1
    return entries


def find_agreement_rows(source, w_sum: np.ndarray, *, quantile: float | None = None,
                        residual_tol: float | None = None, simplex_tol: float = 0.02,
                        max_rows: int | None = None, rng: np.random.Generator | None = None) -> AgreementRows:
    """Decode every row of ``source`` with Ŵ_Σ and keep the agreement rows.

    A row is accepted when its decoded pattern is within ``simplex_tol`` of
    the simplex and its relative residual is at most the threshold of its
    block: the ``quantile`` of the block's residuals (the best fraction of
    rows, used while Ŵ_Σ is crude, and to gather a pool of candidates),
    capped by ``residual_tol`` when both are given, or ``residual_tol`` alone
    (an absolute tolerance, once Ŵ_Σ is accurate).  Blocks are i.i.d., so a
    per-block quantile stands in for the global one and memory stays
    bounded.  ``max_rows`` caps the rows kept (each block keeps its
    proportional share, at random), so that at m = 1, where every row agrees,
    a million sequences do not give four million slabs.

    One pass of :func:`_agreement_block` over the source's blocks
    (``source.map_blocks``), their rows concatenated in block order.  The
    random share of block b comes from ``default_rng([seed, b])`` with one
    ``seed`` drawn from ``rng`` (when ``max_rows`` is given), so it does
    not depend on where or in which order the blocks run.
    :func:`first_agreement_rows` stops once it has ``max_rows`` rows instead.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    seed = None if max_rows is None else draw_seed(rng)
    share = None if max_rows is None else (max_rows, source.samples)
    parts = source.map_blocks(_agreement_block, w_sum, quantile, residual_tol, simplex_tol, share, seed, None,
                              indexed=True)
    return _joined(parts, sum(p.scanned for p in parts), sum(p.found for p in parts))


def first_agreement_rows(source, w_sum: np.ndarray, *, residual_tol: float, simplex_tol: float = 0.02,
                         max_rows: int, rng: np.random.Generator) -> AgreementRows:
    """Rows within ``residual_tol`` (and ``simplex_tol`` of the simplex), the first ``max_rows`` found.

    Blocks are i.i.d., so the first ``max_rows`` agreement rows are a
    sample of them as good as a share of every block's
    (:func:`find_agreement_rows`), and the pass stops at the block that
    completes them: where agreement rows are plentiful (m ≤ 2) it reads a
    fraction of a long stream, and where they are rare it reads all of it.
    Block b's rows are taken in a random order drawn from
    ``default_rng([seed, b])`` (one ``seed`` from ``rng``), so the last block
    read gives a random subset of its rows, not its first ones.  The blocks
    are mapped in waves of ``source.wave_blocks`` (``source.map_until``),
    each block returning at most the rows still missing when its wave started; ``scanned`` and
    ``found`` count the rows of the blocks up to the one that completed
    them, so the result is the same whatever the wave size.
    """
    taken = source.map_until(max_rows, _agreement_block, w_sum, None, residual_tol, simplex_tol, None,
                             draw_seed(rng), indexed=True)
    return _joined([block.subset(np.arange(take)) for block, take in taken],
                   sum(block.scanned for block, _ in taken), sum(block.found for block, _ in taken))


def _joined(parts: list, scanned: int, found: int) -> AgreementRows:
    """The blocks' agreement rows in block order, as one AgreementRows with these counts."""
    fields = ("tokens", "query", "label", "pattern", "spread", "residual", "violation")
    return AgreementRows(*(np.concatenate([getattr(p, name) for p in parts]) for name in fields), scanned, found)


def _agreement_block(X: np.ndarray, Y: np.ndarray, rows: np.ndarray | None, w_sum: np.ndarray,
                     quantile: float | None, residual_tol: float | None, simplex_tol: float,
                     share: tuple[int, int] | None, seed: int | None, limit: int | None,
                     index: int) -> AgreementRows:
    """The agreement rows of one block's ``rows`` (:func:`find_agreement_rows`, :func:`first_agreement_rows`).

    With ``share`` = (r, n) the block keeps ⌈r · its sequences / n⌉ of them
    at random, in block order; with ``limit``, the first ``limit`` of them in a
    random order (both random orders from ``default_rng([seed, index])``).
    ``scanned`` and ``found`` count the block's decoded and accepted rows.
    """
    residuals, violations = decoding_residuals(X, Y, w_sum, rows)
    samples_kept, query = _accepted(residuals, violations, quantile, residual_tol, simplex_tol)
    found = len(samples_kept)
    if share is not None:
        count = -(-share[0] * residuals.shape[0] // share[1])
        if found > count:
            pick = np.sort(np.random.default_rng([seed, index]).choice(found, count, replace=False))
            samples_kept, query = samples_kept[pick], query[pick]
    if limit is not None:
        # A random order, whatever the limit: a shorter limit keeps a prefix of the same rows.
        pick = np.random.default_rng([seed, index]).permutation(found)[:limit]
        samples_kept, query = samples_kept[pick], query[pick]
    if rows is not None:
        samples_kept = rows[samples_kept]
    # Decoding a row alone repeats the pass's arithmetic: the same residual and violation, to the bit.
    return decoded_rows(X[samples_kept], query.astype(np.int64), Y[samples_kept, query], w_sum, residuals.size,
                        found)


# ---------------------------------------------------------------- slabs

@dataclass
class SlabSystem:
    """Linear constraints on vec Θ from agreement rows.

    Slabs ``|E θ − b| ≤ t`` (one per accepted row and token with â_j ≥ w_min)
    and half-spaces H θ ≤ g (one per negligible token).  ``slab_row`` and
    ``halfspace_row`` give the accepted row each constraint came from.
    """

    E: np.ndarray
    b: np.ndarray
    t: np.ndarray
    H: np.ndarray
    g: np.ndarray
    slab_row: np.ndarray
    halfspace_row: np.ndarray

    @property
    def equalities(self) -> int:
        return len(self.b)

    def row_count(self) -> int:
        """One more than the largest accepted row any constraint came from."""
        return max(self.slab_row.max(initial=-1), self.halfspace_row.max(initial=-1)) + 1

    def row_weights(self, rows: np.ndarray) -> np.ndarray:
        """How often each slab is drawn when the accepted rows ``rows`` are (indices, repeats allowed)."""
        return np.bincount(rows, minlength=self.row_count())[self.slab_row].astype(np.float64)

    def of_rows(self, rows: np.ndarray) -> "SlabSystem":
        """The constraints of the accepted rows ``rows`` (indices, repeats allowed: a row drawn twice
        gives its constraints twice)."""
        counts = np.bincount(rows, minlength=self.row_count())
        slabs = np.repeat(np.arange(len(self.b)), counts[self.slab_row])
        halves = np.repeat(np.arange(len(self.g)), counts[self.halfspace_row])
        return SlabSystem(E=self.E[slabs], b=self.b[slabs], t=self.t[slabs], H=self.H[halves], g=self.g[halves],
                          slab_row=self.slab_row[slabs], halfspace_row=self.halfspace_row[halves])

    def weighted_equalities(self) -> tuple[np.ndarray, np.ndarray]:
        """(E/t, b/t): the equality system with each slab scaled to unit half-width.

        Computed once per system and shared (read-only): phase 4 reads its
        hull from them some 35 times (trimming, residuals, bootstrap).
        """
        return self._weighted_equalities

    @cached_property
    def _weighted_equalities(self) -> tuple[np.ndarray, np.ndarray]:
        return self.E / self.t[:, None], self.b / self.t


def slab_constraints(rows: AgreementRows, *, w_min: float = 0.02, kappa: float = 20.0,
                     t_min: float = 0.02) -> SlabSystem:
    """The slabs and half-spaces that every Θ_i satisfies on the agreement rows.

    For accepted row ℓ with decoded pattern â and top token j₀, and every
    token j not identical to x_{j₀}:

    - â_j ≥ ``w_min``: the slab ``|⟨x_ℓ(x_j − x_{j₀})ᵀ, Θ⟩ − log(â_j/â_{j₀})| ≤ t_j``
      with t_j = κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + t_min (first-order propagation
      of the decoding's uncertainty σ into the log-ratio, widened by κ);
    - â_j < ``w_min``: the half-space ⟨x_ℓ(x_j − x_{j₀})ᵀ, Θ⟩ ≤
      log((w_min + κσ_j) / max(â_{j₀} − κσ_{j₀}, w_min)) + t_min.

    Tokens identical to x_{j₀} carry no constraint (their logits are equal).
    """
    count, k, d = rows.tokens.shape
    index = np.arange(count)
    pattern = rows.pattern
    top = np.argmax(pattern, axis=1)
    top_weight = pattern[index, top]
    top_spread = rows.spread[index, top]
    queries = rows.queries()
    differences = rows.tokens - rows.tokens[index, top][:, None, :]  # (c, k, d): x_j − x_{j₀}
    distinct = np.any(differences != 0, axis=-1)
    slab_mask = distinct & (pattern >= w_min)
    half_mask = distinct & (pattern < w_min)

    def outer(mask):
        source_row, token = np.nonzero(mask)
        matrix = (queries[source_row][:, :, None] * differences[source_row, token][:, None, :]).reshape(-1, d * d)
        return source_row, token, matrix

    slab_row, slab_token, E = outer(slab_mask)
    weight = pattern[slab_row, slab_token]
    b = np.log(weight / top_weight[slab_row])
    t = kappa * (rows.spread[slab_row, slab_token] / weight + top_spread[slab_row] / top_weight[slab_row]) + t_min
    half_row, half_token, H = outer(half_mask)
    ceiling = w_min + kappa * rows.spread[half_row, half_token]
    floor = np.maximum(top_weight[half_row] - kappa * top_spread[half_row], w_min)
    g = np.log(ceiling / floor) + t_min
    return SlabSystem(E=E, b=b, t=t, H=H, g=g, slab_row=slab_row, halfspace_row=half_row)


# ---------------------------------------------------------------- the phase

def draw_pool(source, w_sum: np.ndarray, *, pool_fraction: float, simplex_tol: float, max_pool: int | None,
              min_share: float = 0.0, rng: np.random.Generator | None = None) -> AgreementRows:
    """Candidate agreement rows: the best rows of every block under Ŵ_Σ, about ``max_pool`` in all.

    Each block keeps its best share min(``pool_fraction``, max(``max_pool`` /
    rows of the source, ``min_share``)) by relative residual.  Down to
    ``min_share`` a longer stream gives a more selective pool rather than a
    random subsample of a loose one: at m = 3 agreement rows are ~10⁻⁴ of all
    rows, and a random cap would throw most of them away.  Below it — the
    pool drawn under the crude Ŵ_Σ, which ranks rows too roughly for a finer
    selection to hold more agreement rows — the best ``min_share`` is kept and
    randomly capped at ``max_pool``, so the pool is distributed as on the
    shortest stream that fills it.  With ``pool_fraction = 1`` (m = 1: every
    row agrees) the pool is a random sample of ``max_pool`` rows, so that it
    is not biased towards the rows the crude Ŵ_Σ happens to fit.  The
    simplex test is ten times looser than for acceptance, since the patterns
    of a candidate move as Ŵ_Σ is refined (phase 3).
    """
    share = pool_fraction
    if pool_fraction < 1.0 and max_pool is not None:
        budget = max_pool / (source.samples * source.length)
        share = min(pool_fraction, max(budget, min_share))
        if share <= budget:
            max_pool = None
    return find_agreement_rows(source, w_sum, quantile=share, simplex_tol=10 * simplex_tol,
                               max_rows=max_pool, rng=rng)


@dataclass(frozen=True, kw_only=True)
class SculptedBody(PhaseResult):
    """Phase 2's result: the agreement rows accepted under one Ŵ_Σ and their slabs.

    ``rule`` says how rows were accepted: ``"quantile"`` (the best share of
    every block, while Ŵ_Σ is crude) or ``"absolute"`` (relative residual ≤
    ``residual_tol``, once Ŵ_Σ is refined; the rows of K*).  ``found_rows``
    passed the test before the cap of ``max_rows``; ``accepted_rows`` were
    kept.  Data: the rows, the slabs and, for the quantile rule, the pool of
    candidates our alternating refit starts from.
    """

    rule: str
    accepted_rows: int
    found_rows: int
    accepted_fraction: float
    equalities: int
    halfspaces: int
    rows: AgreementRows = data_field()
    slabs: SlabSystem = data_field()
    pool: AgreementRows | None = data_field()

    columns = ("rule", "accepted_rows", "found_rows", "equalities", "halfspaces")


def sculpt_body(source, w_sum: np.ndarray, heads: int, settings: BodySettings, rng: np.random.Generator, *,
                rule: str) -> SculptedBody:
    """Phase 2: decode every row of ``source`` with Ŵ_Σ, accept the agreement rows, build their slabs.

    ``rule="quantile"`` (crude Ŵ_Σ): one pass draws a pool of the best
    ``pool_fraction`` of each block (kept for phase 3) and accepts its best
    rows, the share ``quantile`` of all rows.  ``rule="absolute"`` (refined
    Ŵ_Σ): rows whose relative residual is ≤ ``residual_tol``, the first
    ``max_rows`` found (:func:`first_agreement_rows`: a pass that stops once
    it has them) — the rows of K*.
    """
    start = time.perf_counter()
    pool = None
    if rule == "quantile":
        quantile, pool_fraction = settings.quantile_for(heads), settings.pool_fraction_for(heads)
        pool = draw_pool(source, w_sum, pool_fraction=pool_fraction, simplex_tol=settings.simplex_tol,
                         max_pool=settings.max_pool_for(heads), min_share=settings.first_pool_share, rng=rng)
        rows = pool.best(min(math.ceil(quantile * pool.scanned), settings.max_rows), simplex_tol=settings.simplex_tol)
    elif rule == "absolute":
        rows = first_agreement_rows(source, w_sum, residual_tol=settings.residual_tol,
                                    simplex_tol=settings.simplex_tol, max_rows=settings.max_rows, rng=rng)
    else:
        raise ValueError(f"rule: expected 'quantile' or 'absolute', received {rule!r}")
    slabs = slab_constraints(rows, w_min=settings.w_min, kappa=settings.slab_width, t_min=settings.slab_floor)
    return SculptedBody(seconds=time.perf_counter() - start, rule=rule, accepted_rows=len(rows),
                        found_rows=int(rows.found), accepted_fraction=float(rows.fraction),
                        equalities=slabs.equalities, halfspaces=len(slabs.g), rows=rows, slabs=slabs, pool=pool)
