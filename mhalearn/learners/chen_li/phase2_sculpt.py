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
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import njit

from ..._numba import DISPATCH, chunk_count, new_counter, next_chunk, thread_driver
from ...seeding import draw_seed
from ..report import PhaseResult, data_field
from .cholesky import cholesky_in_place
from .settings import BodySettings

# ---------------------------------------------------------------- decoding

# A Cholesky pivot below this share of the largest diagonal entry marks the
# distinct tokens' rows of X Ŵ_Σ as linearly dependent (Ŵ_Σ near singular).
_CHOLESKY_FLOOR = 1e-12


@njit(inline="always", cache=True)
def group_identical_tokens(x, group, first):
    """Number the distinct tokens of one sequence ``x`` (k, d) in order of first appearance.

    Writes group[j] = the number of token j's class and first[u] = the first
    token of class u; returns the number of classes.  Identical tokens get
    identical logits under every Θ, so the kernels treat each class as one token.
    """
    k, d = x.shape
    unique = 0
    for j in range(k):
        group[j] = -1
        for u in range(unique):
            same = True
            for e in range(d):
                if x[first[u], e] != x[j, e]:
                    same = False
                    break
            if same:
                group[j] = u
                break
        if group[j] < 0:
            group[j] = unique
            first[unique] = j
            unique += 1
    return unique


@njit(inline="always", cache=True)
def _cholesky_solve(L, size, rhs, out):
    """Solve (L Lᵀ) out = rhs for the leading ``size`` entries."""
    for j in range(size):
        value = rhs[j]
        for t in range(j):
            value -= L[j, t] * out[t]
        out[j] = value / L[j, j]
    for j in range(size - 1, -1, -1):
        value = out[j]
        for t in range(j + 1, size):
            value -= L[t, j] * out[t]
        out[j] = value / L[j, j]


@njit(cache=True, nogil=True)
def _decode_patterns_worker(X, Y, w_sum, full, chunks, counter, patterns, residuals, violations, spreads):
    # ``full`` False: residuals and violations only (the acceptance test needs no more; the rows it
    # keeps are decoded in full afterwards, with the same arithmetic, hence the same bits).
    n, k, d = X.shape
    labels = Y.shape[1]
    # Scratch for the largest case (k distinct tokens), allocated once per worker:
    # a dozen small allocations per sequence cost as much as the arithmetic.
    group = np.empty(k, dtype=np.int64)
    first = np.empty(k, dtype=np.int64)
    count = np.empty(k)
    values = np.empty((k, d))
    width = max(k - 1, 1)
    differences = np.empty((width, d))
    gram = np.empty((width, width))
    variance = np.empty(k)
    unit = np.zeros(width)
    column = np.empty(width)
    ones = np.ones(width)
    projected = np.empty(width)
    solution = np.empty(width)
    weights = np.empty(k)
    chunk = next_chunk(counter)
    while chunk < chunks:
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            # Identical tokens get identical attention: decode over distinct tokens.
            unique = group_identical_tokens(X[s], group, first)
            count[:] = 0.0
            for j in range(k):
                count[group[j]] += 1.0
            values[:unique] = 0.0  # x_u Ŵ_Σ
            for u in range(unique):
                for a in range(d):
                    x = X[s, first[u], a]
                    for e in range(d):
                        values[u, e] += x * w_sum[a, e]
            # â = e_0 + Σ_{u≥1} c_u (e_u − e_0): least squares of y − v_0 on the
            # differences v_u − v_0, which needs the points affinely independent only.
            free = unique - 1
            for u in range(free):
                for e in range(d):
                    differences[u, e] = values[u + 1, e] - values[0, e]
            for u in range(free):
                for v in range(u + 1):
                    total = 0.0
                    for e in range(d):
                        total += differences[u, e] * differences[v, e]
                    gram[u, v] = total
                    gram[v, u] = total
            if free > 0 and not cholesky_in_place(gram, free, _CHOLESKY_FLOOR):
                for row in range(labels):
                    residuals[s, row] = np.inf
                    violations[s, row] = np.inf
                    if full:
                        for j in range(k):
                            patterns[s, row, j] = np.nan
                            spreads[s, row, j] = np.inf
                continue
            # Variance of each â_u per unit label noise: diag of (DDᵀ)⁻¹ for the
            # free weights, 1ᵀ(DDᵀ)⁻¹1 for the reference weight 1 − Σ c_u.
            variance[:unique] = 0.0
            for u in range(free if full else 0):
                unit[u] = 1.0
                _cholesky_solve(gram, free, unit, column)
                unit[u] = 0.0
                variance[u + 1] = max(column[u], 0.0)
            if full and free > 0:
                _cholesky_solve(gram, free, ones, column)
                total = 0.0
                for u in range(free):
                    total += column[u]
                variance[0] = max(total, 0.0)
            degrees = max(d - free, 1)
            for row in range(labels):
                for u in range(free):
                    total = 0.0
                    for e in range(d):
                        total += differences[u, e] * (Y[s, row, e] - values[0, e])
                    projected[u] = total
                if free > 0:
                    _cholesky_solve(gram, free, projected, solution)
                weights[0] = 1.0
                for u in range(free):
                    weights[u + 1] = solution[u]
                    weights[0] -= solution[u]
                squared = 0.0
                label_squared = 0.0
                for e in range(d):
                    fitted = 0.0
                    for u in range(unique):
                        fitted += weights[u] * values[u, e]
                    squared += (fitted - Y[s, row, e]) ** 2
                    label_squared += Y[s, row, e] ** 2
                residual = np.sqrt(squared)
                residuals[s, row] = residual / np.sqrt(label_squared) if label_squared > 0.0 else np.inf
                noise = residual / np.sqrt(degrees)
                violation = 0.0
                for u in range(unique):
                    violation = max(violation, -weights[u] / count[u], weights[u] / count[u] - 1.0)
                violations[s, row] = violation
                for j in range(k if full else 0):
                    u = group[j]
                    patterns[s, row, j] = weights[u] / count[u]
                    spreads[s, row, j] = noise * np.sqrt(variance[u]) / count[u]
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


def decoding_residuals(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``residuals`` and ``violations`` of :func:`decode_patterns`, bit for bit, without the patterns.

    What the acceptance test of every row needs: it skips the spreads'
    solves and the (n, r, k) outputs, so a pass over the data decodes in
    full only the rows it keeps.
    """
    _, residuals, violations, _ = _decode(X, Y, w_sum, full=False)
    return residuals, violations


def _decode(X, Y, w_sum, *, full: bool):
    n, k, _ = X.shape
    labels = Y.shape[1]
    outputs = (n, labels, k) if full else (0, 0, 0)
    patterns, spreads = np.empty(outputs), np.empty(outputs)
    residuals = np.empty((n, labels))
    violations = np.empty((n, labels))
    X, Y = np.ascontiguousarray(X), np.ascontiguousarray(Y)
    w_sum = np.ascontiguousarray(w_sum, dtype=np.float64)
    d = X.shape[2]
    chunks = chunk_count(n)
    DISPATCH.run("decode_patterns", n * k * d * (d + k + labels), _decode_patterns_worker,
                 _decode_patterns_parallel, X, Y, w_sum, full, chunks, new_counter(), patterns, residuals,
                 violations, spreads)
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

    def __post_init__(self):
        if self.found is None:
            self.found = len(self.query)

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
        """``self.redecode(w_sum).best(count)``, bit for bit, with only the chosen rows decoded in full.

        The ranking needs each row's residual and violation alone
        (:func:`decoding_residuals`); the patterns and spreads are computed for
        the ``count`` rows kept.
        """
        residuals, violations = decoding_residuals(self.tokens, self.label[:, None, :], w_sum)
        keep = best_rows(residuals[:, 0], violations[:, 0], count, simplex_tol)
        return decoded_rows(self.tokens[keep], self.query[keep], self.label[keep], w_sum, self.scanned)

    def accept(self, *, quantile: float | None = None, residual_tol: float | None = None,
               simplex_tol: float = 0.02) -> "AgreementRows":
        """Rows within ``simplex_tol`` of the simplex whose relative residual is at
        most the ``quantile`` of those rows' residuals (capped by ``residual_tol``
        when both are given) or at most ``residual_tol``."""
        return self.subset(_accepted(self.residual, self.violation, quantile, residual_tol, simplex_tol))

    def best(self, count: int, *, simplex_tol: float = 0.02) -> "AgreementRows":
        """The ``count`` rows within ``simplex_tol`` of the simplex with the smallest relative residuals."""
        return self.subset(best_rows(self.residual, self.violation, count, simplex_tol))

    def mixed_tokens(self) -> np.ndarray:
        """âᵀ X for every row, shape (c, d): y_ℓ = (âᵀX) W_Σ on a true agreement row."""
        return np.einsum("cj,cjd->cd", self.pattern, self.tokens)

    def queries(self) -> np.ndarray:
        """The query token x_ℓ of every row, shape (c, d)."""
        return self.tokens[np.arange(len(self)), self.query]


def decoded_rows(tokens: np.ndarray, query: np.ndarray, label: np.ndarray, w_sum: np.ndarray, scanned: int,
                 found: int | None = None) -> AgreementRows:
    """The rows (``tokens``, ``query``, ``label``) decoded with Ŵ_Σ (:func:`decode_patterns`), as AgreementRows."""
    patterns, residuals, violations, spreads = decode_patterns(tokens, label[:, None, :], w_sum)
    return AgreementRows(tokens, query, label, patterns[:, 0], spreads[:, 0], residuals[:, 0], violations[:, 0],
                         scanned, found)


def best_rows(residual: np.ndarray, violation: np.ndarray, count: int, simplex_tol: float) -> np.ndarray:
    """Indices, ascending, of the ``count`` rows within ``simplex_tol`` of the simplex with the smallest residuals."""
    usable = np.flatnonzero((violation <= simplex_tol) & np.isfinite(residual))
    if len(usable) > count:
        usable = usable[np.argsort(residual[usable], kind="stable")[:count]]
    return np.sort(usable)


def _accepted(residual, violation, quantile, residual_tol, simplex_tol) -> np.ndarray:
    """Boolean mask of the acceptance rule shared by blocks and pools."""
    if quantile is None and residual_tol is None:
        raise ValueError("agreement rows: give a quantile, a residual_tol or both")
    usable = (violation <= simplex_tol) & np.isfinite(residual)
    if not np.any(usable):
        return usable
    threshold = np.inf if quantile is None else float(np.quantile(residual[usable], quantile))
    if residual_tol is not None:
        threshold = min(threshold, residual_tol)
    return usable & (residual <= threshold)


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
    """
    rng = np.random.default_rng(0) if rng is None else rng
    seed = None if max_rows is None else draw_seed(rng)
    parts = source.map_blocks(_agreement_block, w_sum, quantile, residual_tol, simplex_tol, max_rows,
                              source.samples, seed, indexed=True)
    fields = ("tokens", "query", "label", "pattern", "spread", "residual", "violation")
    return AgreementRows(*(np.concatenate([getattr(p, name) for p in parts]) for name in fields),
                         sum(p.scanned for p in parts), sum(p.found for p in parts))


def _agreement_block(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray, quantile: float | None,
                     residual_tol: float | None, simplex_tol: float, max_rows: int | None, samples: int,
                     seed: int | None, index: int) -> AgreementRows:
    """The agreement rows of one block (:func:`find_agreement_rows`), at most its share of ``max_rows``.

    ``samples`` is the source's length (the block keeps ``⌈max_rows · its
    sequences / samples⌉`` rows, chosen with ``default_rng([seed, index])``).
    ``scanned`` and ``found`` count the block's decoded and accepted rows.
    """
    residuals, violations = decoding_residuals(X, Y, w_sum)
    samples_kept, rows = np.nonzero(_accepted(residuals, violations, quantile, residual_tol, simplex_tol))
    found = len(samples_kept)
    if max_rows is not None:
        share = int(np.ceil(max_rows * X.shape[0] / samples))
        if found > share:
            pick = np.sort(np.random.default_rng([seed, index]).choice(found, share, replace=False))
            samples_kept, rows = samples_kept[pick], rows[pick]
    # Decoding a row alone repeats the pass's arithmetic: the same residual and violation, to the bit.
    return decoded_rows(X[samples_kept], rows.astype(np.int64), Y[samples_kept, rows], w_sum, residuals.size, found)


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
    Ŵ_Σ): rows whose relative residual is ≤ ``residual_tol``, at most
    ``max_rows`` kept at random — the rows of K*.
    """
    start = time.perf_counter()
    pool = None
    if rule == "quantile":
        quantile, pool_fraction = settings.quantile_for(heads), settings.pool_fraction_for(heads)
        pool = draw_pool(source, w_sum, pool_fraction=pool_fraction, simplex_tol=settings.simplex_tol,
                         max_pool=settings.max_pool_for(heads), min_share=settings.first_pool_share, rng=rng)
        rows = pool.best(min(math.ceil(quantile * pool.scanned), settings.max_rows), simplex_tol=settings.simplex_tol)
    elif rule == "absolute":
        rows = find_agreement_rows(source, w_sum, residual_tol=settings.residual_tol,
                                   simplex_tol=settings.simplex_tol, max_rows=settings.max_rows, rng=rng)
    else:
        raise ValueError(f"rule: expected 'quantile' or 'absolute', received {rule!r}")
    slabs = slab_constraints(rows, w_min=settings.w_min, kappa=settings.slab_width, t_min=settings.slab_floor)
    return SculptedBody(seconds=time.perf_counter() - start, rule=rule, accepted_rows=len(rows),
                        found_rows=int(rows.found), accepted_fraction=float(rows.fraction),
                        equalities=slabs.equalities, halfspaces=len(slabs.g), rows=rows, slabs=slabs, pool=pool)
