"""Slabs: the linear constraints on every Θ_i that the accepted agreement rows give.

On an agreement row the log-ratios of the pattern are linear in every Θ_i:

    log(a_j / a_{j₀}) = ⟨x_ℓ (x_j − x_{j₀})ᵀ, Θ_i⟩     for every head i,

so each accepted row gives *slabs* ``|⟨C, Θ⟩ − log(â_j/â_{j₀})| ≤ t_j`` for the
tokens with â_j ≥ w_min (j₀ the top token, t_j from the decoding's
uncertainty σ_j: t_j = κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + t_min) and one-sided
constraints ⟨C, Θ⟩ ≤ log((w_min + κσ_j)/(â_{j₀} − κσ_{j₀})) for the negligible
tokens (:func:`slab_constraints`).  Every Θ_i satisfies them, and so does every
affine combination of the Θ_i: their intersection is long along aff{Θ_i} and
thin across it (:mod:`mhalearn.learners.chen_li.body`).  :class:`SlabSystem`
holds them, each with the accepted row it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..._memory import get_memory_budget
from ...data.phase_files import register_kept
from .agreement_rows import AgreementRows
from .settings import BodySettings


@register_kept
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

    def row_weights(self, accepted: np.ndarray) -> np.ndarray:
        """How often each slab is drawn when the accepted rows ``accepted`` are (indices, repeats allowed)."""
        return np.bincount(accepted, minlength=self.row_count())[self.slab_row].astype(np.float64)

    def of_rows(self, accepted: np.ndarray) -> "SlabSystem":
        """The constraints of the accepted rows ``accepted`` (indices, repeats allowed: a row drawn twice
        gives its constraints twice)."""
        counts = np.bincount(accepted, minlength=self.row_count())
        slabs = np.repeat(np.arange(len(self.b)), counts[self.slab_row])
        halves = np.repeat(np.arange(len(self.g)), counts[self.halfspace_row])
        return SlabSystem(E=self.E[slabs], b=self.b[slabs], t=self.t[slabs], H=self.H[halves], g=self.g[halves],
                          slab_row=self.slab_row[slabs], halfspace_row=self.halfspace_row[halves])

    def weighted_equalities(self) -> tuple[np.ndarray, np.ndarray]:
        """(E/t, b/t): the equality system with each slab scaled to unit half-width.

        Computed once per system and shared (read-only): phase 4 reads its
        hull from them some 35 times (trimming, residuals, the error estimate).
        """
        return self._weighted_equalities

    @cached_property
    def _weighted_equalities(self) -> tuple[np.ndarray, np.ndarray]:
        return self.E / self.t[:, None], self.b / self.t


def top_differences(accepted: AgreementRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each accepted row's top token j₀, the differences x_j − x_{j₀} (c, k, d), and which tokens differ from
    x_{j₀}: those that carry a constraint (a slab or a half-space)."""
    top = np.argmax(accepted.pattern, axis=1)
    differences = accepted.tokens - accepted.tokens[np.arange(len(top)), top][:, None, :]
    return top, differences, np.any(differences != 0, axis=-1)


def distinct_token_weights(accepted: AgreementRows) -> np.ndarray:
    """The decoded weights â_j of every accepted row's tokens that differ from its top token, flattened."""
    return accepted.pattern[top_differences(accepted)[2]]


def kstar_weight_threshold(accepted: AgreementRows, *, w_min: float, slabs_wanted: int, w_max: float) -> float:
    """The weight at and above which K*'s tokens give slabs: the largest in [``w_min``, ``w_max``] that leaves
    at least ``slabs_wanted`` slabs (``w_min`` when there are no more than that).

    Why: an agreement row passes when the heads' patterns are close in ℓ1, so
    on a token of small weight â_j the heads' log-ratios can differ by about
    (their weights' spread)/â_j — nats at â_j ≈ 0.03 in the m = 4 cells
    of ``sculpt-vs-m``.  Those slabs make the hull as thick as
    directions the rows hardly touch, a bias that more rows do not remove;
    slabs of larger weight carry less of it.  With few rows every slab is
    needed (K* must hold ``equalities_needed``); with more, the tokens of
    smallest weight become half-spaces, so K* trades the slabs it can spare
    for a thinner hull ([decision: kstar-slab-threshold]).
    """
    weights = distinct_token_weights(accepted)
    weights = weights[weights >= w_min]
    if len(weights) <= slabs_wanted:
        return float(w_min)
    largest = np.partition(weights, len(weights) - slabs_wanted)[len(weights) - slabs_wanted]
    return float(min(max(largest, w_min), w_max))


def kstar_slab_rule(accepted: AgreementRows, settings: BodySettings) -> dict:
    """K*'s slab rule on its ``accepted`` rows: ``settings.slab_rule()`` with w_min raised to
    :func:`kstar_weight_threshold` (``kstar_slabs`` wanted, at most ``kstar_w_max``)."""
    dim = accepted.tokens.shape[-1]
    threshold = kstar_weight_threshold(accepted, w_min=settings.w_min, slabs_wanted=settings.kstar_slabs_for(dim),
                                       w_max=settings.kstar_w_max)
    return {**settings.slab_rule(), "w_min": threshold}


def rows_within_slabs(accepted: AgreementRows, w_min: float, max_slabs: int) -> AgreementRows:
    """The first rows of ``accepted``, in order, whose slabs at the weight threshold ``w_min`` number at most
    ``max_slabs`` in all (every row when they do); ``found`` is kept.

    Phase 4's memory and time grow with K*'s slabs, d² numbers each, read some 35 times: where agreement
    rows are plentiful (m ≤ 2) a long stream gives millions, and a share of them reads the span as well.
    """
    slabs_per_row = np.count_nonzero(top_differences(accepted)[2] & (accepted.pattern >= w_min), axis=1)
    count = int(np.searchsorted(np.cumsum(slabs_per_row), max_slabs, side="right"))
    if count >= len(accepted):
        return accepted
    kept = accepted.subset(np.arange(count))
    kept.found = accepted.found
    return kept


#: Share of the memory budget K*'s slabs may take (phase 4 holds their d² coefficients three times: the slabs,
#: scaled to unit width, and a weighted copy for each reading of the hull).
KSTAR_BUDGET_SHARE = 0.25


def kstar_slab_cap(settings: BodySettings, dim: int) -> int:
    """Slabs K* reads at most: ``kstar_max_slabs``, fewer when a quarter of the memory budget
    (:func:`mhalearn.set_memory_budget`) holds fewer, never fewer than the ``kstar_slabs_for`` its
    threshold rule wants."""
    budget = get_memory_budget()
    cap = settings.kstar_max_slabs
    if budget is not None:
        cap = min(cap, int(KSTAR_BUDGET_SHARE * budget) // (3 * 8 * dim * dim))
    return max(cap, settings.kstar_slabs_for(dim))


def slab_constraints(accepted: AgreementRows, *, w_min: float, kappa: float, t_min: float,
                     halfspace_rows: int | None = None) -> SlabSystem:
    """The slabs and half-spaces that every Θ_i satisfies on the ``accepted`` agreement rows.

    ``halfspace_rows``: the half-spaces of the first that many rows only (None: of every row).  K* reads
    hundreds of thousands of rows at m = 4, and a half-space is d² numbers for every negligible token of
    every row (k − 1 of most rows), while phase 4 reads the slabs alone and the convex body's solver
    takes a random ``max_constraints`` of them anyway.

    For accepted row ℓ with decoded pattern â and top token j₀, and every
    token j not identical to x_{j₀}:

    - â_j ≥ ``w_min``: the slab ``|⟨x_ℓ(x_j − x_{j₀})ᵀ, Θ⟩ − log(â_j/â_{j₀})| ≤ t_j``
      with t_j = κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + t_min (first-order propagation
      of the decoding's uncertainty σ into the log-ratio, widened by κ);
    - â_j < ``w_min``: the half-space ⟨x_ℓ(x_j − x_{j₀})ᵀ, Θ⟩ ≤
      log((w_min + κσ_j) / max(â_{j₀} − κσ_{j₀}, w_min)) + t_min.

    Tokens identical to x_{j₀} carry no constraint (their logits are equal).
    """
    count, k, d = accepted.tokens.shape
    index = np.arange(count)
    pattern = accepted.pattern
    top, differences, distinct = top_differences(accepted)
    top_weight = pattern[index, top]
    top_spread = accepted.spread[index, top]
    queries = accepted.queries()
    slab_mask = distinct & (pattern >= w_min)
    half_mask = distinct & (pattern < w_min)
    if halfspace_rows is not None:
        half_mask[halfspace_rows:] = False

    def outer(mask):
        source_row, token = np.nonzero(mask)
        matrix = (queries[source_row][:, :, None] * differences[source_row, token][:, None, :]).reshape(-1, d * d)
        return source_row, token, matrix

    slab_row, slab_token, E = outer(slab_mask)
    weight = pattern[slab_row, slab_token]
    b = np.log(weight / top_weight[slab_row])
    t = kappa * (accepted.spread[slab_row, slab_token] / weight + top_spread[slab_row] / top_weight[slab_row]) + t_min
    half_row, half_token, H = outer(half_mask)
    ceiling = w_min + kappa * accepted.spread[half_row, half_token]
    floor = np.maximum(top_weight[half_row] - kappa * top_spread[half_row], w_min)
    g = np.log(ceiling / floor) + t_min
    return SlabSystem(E=E, b=b, t=t, H=H, g=g, slab_row=slab_row, halfspace_row=half_row)
