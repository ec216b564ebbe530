"""Agreement rows: labelled rows with their decoded patterns, a pool of candidates or the rows accepted.

:class:`AgreementRows` holds rows (a sequence, its query index ℓ and label
y_ℓ) with the pattern â, spreads σ, residual and distance from the simplex
that the decoder (:mod:`~mhalearn.learners.chen_li.decoder`) gave them under
one Ŵ_Σ.  A *pool* is the candidates a pass keeps (phase 2 draws it, phase
3's refit decodes it again under every new Ŵ_Σ and takes its best,
:meth:`AgreementRows.best_under`, decoding only the rows a bound does not
rule out, :class:`_Redecoding`); the *accepted* rows are those that pass the
acceptance rule (:func:`accepted_entries`, :func:`best_rows`), whose slabs
phase 2 builds (:mod:`~mhalearn.learners.chen_li.slabs`).  The passes over a
source that find them are :mod:`~mhalearn.learners.chen_li.agreement_passes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ...data.phase_files import register_kept
from ...data.sources import CodedTokens
from ...data.token_codes import block_codes, code_groups
from ..order_statistics import quantile_of_finite
from .decoder import decode_patterns, decoding_residuals

# The pool's bound on a residual under a new Ŵ_Σ is shrunk by this share for the decoder's rounding: its
# residuals above 1 % of ‖y − v_0‖ (every one a bound can rule out) keep 6 digits while the 3 × 3 Gram
# matrix's condition number is below 10⁶ (Boolean tokens and a Ŵ_Σ of condition ~10² stay far below).
_BOUND_SLACK = 1e-6


@register_kept
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

    tokens: np.ndarray | CodedTokens
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
        """The tokens with their codes (:class:`~mhalearn.data.sources.CodedTokens`) when every one is
        Boolean, else the tokens: coded once, since our refit decodes its pool again at every iteration."""
        if isinstance(self.tokens, CodedTokens):
            return self.tokens
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
        return AgreementRows(row_tokens(self.tokens, keep), self.query[keep], self.label[keep], self.pattern[keep],
                             self.spread[keep], self.residual[keep], self.violation[keep], self.scanned)

    def redecode(self, w_sum: np.ndarray) -> "AgreementRows":
        """The same rows decoded again with another Ŵ_Σ."""
        return decoded_rows(self.tokens, self.query, self.label, w_sum, self.scanned)

    def best_under(self, w_sum: np.ndarray, count: int, *, simplex_tol: float) -> "AgreementRows":
        """``self.redecode(w_sum).best(count, simplex_tol=simplex_tol)``, bit for bit, with only the rows that
        can be chosen decoded.

        The ranking needs each row's residual and violation alone
        (:func:`~mhalearn.learners.chen_li.decoder.decoding_residuals`), and
        only for the rows that a bound from their last decoding does not rule
        out (:class:`_Redecoding`): called again and again under a Ŵ_Σ that
        moves less and less, as our refit does, it decodes a shrinking share
        of the rows.  The patterns and spreads are computed for the ``count``
        rows kept.
        """
        if self._redecoding is None:
            self._redecoding = _Redecoding(self)
        residuals, violations = self._redecoding.residuals_under(self.coded_tokens(), self.label, w_sum, count,
                                                                 simplex_tol)
        keep = best_rows(residuals, violations, count, simplex_tol)
        return decoded_rows(row_tokens(self.tokens, keep), self.query[keep], self.label[keep], w_sum, self.scanned)

    def accepted_under(self, w_sum: np.ndarray, *, residual_tol: float, simplex_tol: float,
                       max_rows: int) -> "AgreementRows":
        """The first ``max_rows`` rows, in order, whose relative residual under Ŵ_Σ is ≤ ``residual_tol``
        and pattern within ``simplex_tol`` of the simplex, decoded under Ŵ_Σ; ``found`` counts them all.

        What phase 4 reads from the candidate pass's rows
        (:func:`~mhalearn.learners.chen_li.agreement_passes.reachable_rows`).
        """
        residuals, violations = decoding_residuals(self.coded_tokens(), self.label[:, None, :], w_sum)
        kept = accepted_entries(residuals[:, 0], violations[:, 0], None, residual_tol, simplex_tol)[0]
        found, kept = len(kept), kept[:max_rows]
        return decoded_rows(row_tokens(self.tokens, kept), self.query[kept], self.label[kept], w_sum, self.scanned,
                            found)

    def accept(self, *, quantile: float | None = None, residual_tol: float | None = None,
               simplex_tol: float) -> "AgreementRows":
        """Rows within ``simplex_tol`` of the simplex whose relative residual is at
        most the ``quantile`` of those rows' residuals (capped by ``residual_tol``
        when both are given) or at most ``residual_tol``."""
        return self.subset(accepted_entries(self.residual, self.violation, quantile, residual_tol,
                                            simplex_tol)[0])

    def best(self, count: int, *, simplex_tol: float) -> "AgreementRows":
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

    def __init__(self, pool: AgreementRows):
        self.residual = np.full(len(pool), np.inf)
        self.decoded_at = np.full(len(pool), -1)  # the call that last decoded each row (-1: none)
        self.estimates = []  # Ŵ_Σ of every call
        self.threshold, self.decoded = -np.inf, 0  # the last call's count-th residual, and its rows decoded
        self.reach = residual_reach(pool.tokens, pool.label[:, None, :])[:, 0]
        self.length = pool.tokens.shape[1]

    def residuals_under(self, tokens, labels: np.ndarray, w_sum: np.ndarray, count: int, simplex_tol: float):
        """Residuals and violations under ``w_sum``: decoded for the rows that may be among the best
        ``count``, +inf and 0 for the rows ruled out (they can never be chosen)."""
        moves = np.full(len(self.estimates) + 1, np.inf)  # by the call that last decoded a row; none: the last
        # The calls that last decoded some row: a count of each (np.unique sorts the pool's calls, 5× the time).
        for call in np.flatnonzero(np.bincount(self.decoded_at + 1, minlength=len(self.estimates) + 1)[1:]):
            moves[call] = np.linalg.norm(w_sum - self.estimates[call], 2)
        moves *= simplex_slack(self.length, simplex_tol)
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


def row_tokens(tokens, index):
    """The tokens of the sequences ``index`` of ``tokens`` (an array, or a
    :class:`~mhalearn.data.sources.CodedTokens` block), as :class:`AgreementRows` holds them.

    A block's Boolean tokens stay coded: a CodedTokens without tokens, 8 bytes a sequence at d = 12,
    k = 4 against 384 as float64, decoded (±1.0, the block's values) only where the rows are read as an
    array.  A pool's rows are joined and subset on every pass and every iteration of our refit, on the
    caller's thread while the workers wait, and float64 tokens would be two thirds of their bytes.
    """
    if _coded_float_signs(tokens):
        return CodedTokens(None, tokens.codes[index], tokens.shape[2])
    return tokens[index]


def joined_tokens(parts: list):
    """The tokens of several :class:`AgreementRows` in order: coded when every part's are."""
    if all(_coded_float_signs(part) for part in parts):
        return CodedTokens(None, np.concatenate([part.codes for part in parts]), parts[0].shape[2])
    return np.concatenate([np.asarray(part) for part in parts])


def _coded_float_signs(tokens) -> bool:
    """Whether ``tokens`` are a CodedTokens whose float64 ±1 their codes give (decoded already or not)."""
    return isinstance(tokens, CodedTokens) and (tokens.tokens is None or tokens.tokens.dtype == np.float64)


def residual_reach(tokens, labels: np.ndarray) -> np.ndarray:
    """max_j ‖x_j‖ / ‖y‖ for each label row y of ``labels`` (n, r, d) of the sequences ``tokens`` (n, k, d):
    times :func:`simplex_slack`, how far a row's relative residual can fall per unit ‖ΔŴ_Σ‖₂
    (:class:`_Redecoding`; inf or NaN where y = 0).  Tokens known by their codes are ±1: ‖x_j‖² is d,
    the sum NumPy forms of d squares of ±1, so √d is its bits without decoding them."""
    label_norm = np.sqrt(np.einsum("nrd,nrd->nr", labels, labels))  # a quarter of norm's time
    if _coded_float_signs(tokens):
        token_norm = np.full(len(tokens), np.sqrt(float(tokens.shape[2])))
    else:
        token_norm = np.sqrt(np.einsum("nkd,nkd->nk", tokens, tokens).max(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return token_norm[:, None] / label_norm


@njit(cache=True, nogil=True)
def reachable_sequences(residuals, violations, X, boolean, squares, sequences, threshold, reach_radius,
                        simplex_tol):
    """Positions (into ``sequences``) of the sequences one of whose rows may have a residual within
    ``threshold`` at the distance ``reach_radius`` / (A · slack), A = :func:`simplex_slack`: those with a
    row within ``simplex_tol`` of the simplex, a finite residual r and

        max(r − threshold, 0) · ‖y‖ ≤ ``reach_radius`` · max_j ‖x_j‖,

    ‖y‖² = ``squares`` [position, row], the decoder's (the label divided by its scale,
    :func:`~mhalearn.learners.chen_li.decoder.decoding_residuals`); ``reach_radius`` carries the slack that
    makes the test a superset of the one with :func:`residual_reach` (these sums run in another order than
    NumPy's).  ``boolean``: X's entries are ±1, so ‖x_j‖² = d and X is not read.  One sweep, that reads no
    label: reading each row's to sum its squares costs a fifth of the decoding."""
    kept = np.empty(sequences.shape[0], dtype=np.int64)
    count = 0
    k, d = X.shape[1], X.shape[2]
    for position in range(sequences.shape[0]):
        s = sequences[position]
        token_square = -1.0  # not computed yet
        for row in range(residuals.shape[1]):
            residual = residuals[position, row]
            if not (violations[position, row] <= simplex_tol and np.isfinite(residual)):
                continue
            excess = residual - threshold
            if excess > 0.0:
                if token_square < 0.0:
                    token_square = float(d)
                    if not boolean:
                        token_square = 0.0
                        for j in range(k):
                            total = 0.0
                            for e in range(d):
                                total += X[s, j, e] * X[s, j, e]
                            token_square = max(token_square, total)
                if (excess * excess) * squares[position, row] > (reach_radius * reach_radius) * token_square:
                    continue
            kept[count] = position
            count += 1
            break
    return kept[:count]


def simplex_slack(length: int, simplex_tol: float) -> float:
    """A = 1 + 2kτ, the largest ‖â‖₁ of a pattern within ``simplex_tol`` = τ of the simplex in R^k."""
    return 1.0 + 2.0 * length * simplex_tol


def decoded_rows(tokens, query: np.ndarray, label: np.ndarray, w_sum: np.ndarray, scanned: int,
                 found: int | None = None) -> AgreementRows:
    """The rows (``tokens``, an array or coded, ``query``, ``label``) decoded with Ŵ_Σ
    (:func:`~mhalearn.learners.chen_li.decoder.decode_patterns`), as AgreementRows."""
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


def accepted_entries(residual, violation, quantile, residual_tol, simplex_tol) -> tuple[np.ndarray, ...]:
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
        usable = _usable_residuals(flat_residual, flat_violation, simplex_tol)
        if len(usable) == 0:
            return np.nonzero(np.zeros(residual.shape, dtype=bool))
        threshold = quantile_of_finite(usable, quantile)
    if residual_tol is not None:
        threshold = min(threshold, residual_tol)
    return np.unravel_index(_entries_within(flat_residual, flat_violation, simplex_tol, threshold), residual.shape)


@njit(cache=True, nogil=True)
def _entries_within(residual, violation, simplex_tol, threshold):
    """Ascending indices of the entries within ``simplex_tol`` of the simplex with a finite residual at most
    ``threshold``: one read of each array, no temporary masks, and no branch (every index is written where
    the next one kept goes, and counted when it is kept): a branch on a test that a third of the entries
    pass is mispredicted at every other entry."""
    entries = np.empty(residual.shape[0], dtype=np.int64)
    count = 0
    for at in range(residual.shape[0]):
        entries[count] = at
        count += (violation[at] <= simplex_tol) & np.isfinite(residual[at]) & (residual[at] <= threshold)
    return entries[:count].copy()


@njit(cache=True, nogil=True)
def _usable_residuals(residual, violation, simplex_tol):
    """The finite residuals of the entries within ``simplex_tol`` of the simplex, in order: the values of
    :func:`_entries_within` at no threshold, in one sweep without their indices, as
    :func:`_entries_within` writes them."""
    values = np.empty(residual.shape[0])
    count = 0
    for at in range(residual.shape[0]):
        values[count] = residual[at]
        count += (violation[at] <= simplex_tol) & np.isfinite(residual[at])
    return values[:count]
