"""Phase 2 of Chen & Li's learner: sculpt the body — find the agreement rows and turn them into slabs.

A query row ℓ of a sequence is an *agreement row* when every head gives it
the same attention pattern a; its label is then aᵀ X W_Σ with W_Σ = Σ_i W_i,
so under an estimate Ŵ_Σ its pattern is *decoded* by affine least squares
with a small residual and close to the simplex
(:mod:`~mhalearn.learners.chen_li.decoder`).  On an agreement row the
pattern's log-ratios are linear in every Θ_i, so each accepted row gives
*slabs* that every Θ_i, and every affine combination of them, satisfies
(:mod:`~mhalearn.learners.chen_li.slabs`): their intersection is long along
aff{Θ_i} and thin across it (:mod:`~mhalearn.learners.chen_li.body`).

:func:`sculpt_body` is the phase: one pass that decodes every row with Ŵ_Σ
(:mod:`~mhalearn.learners.chen_li.agreement_passes`), accepts the agreement
rows (:class:`~mhalearn.learners.chen_li.agreement_rows.AgreementRows`) and
returns their slabs.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..report import PhaseResult, data_field
from .agreement_passes import draw_pool, first_agreement_rows
from .agreement_rows import AgreementRows
from .noise import estimate_tolerance
from .settings import BodySettings
from .slabs import SlabSystem, kstar_slab_cap, kstar_slab_rule, rows_within_slabs, slab_constraints


@dataclass(frozen=True, kw_only=True)
class SculptedBody(PhaseResult):
    """Phase 2's result: the agreement rows accepted under one Ŵ_Σ and their slabs.

    ``rule`` says how rows were accepted: ``"quantile"`` (the best share of
    every block, while Ŵ_Σ is crude) or ``"absolute"`` (relative residual ≤
    ``residual_tol``, once Ŵ_Σ is refined; the rows of K*).  ``found_rows``
    passed the test before any cap (``max_rows`` for K, ``kstar_max_slabs`` for K*);
    ``accepted_rows`` were kept.  ``slab_threshold`` is the decoded weight at and above which a
    token gave a slab: ``w_min`` for K, raised for K* when its rows hold more
    slabs than it needs (:func:`~mhalearn.learners.chen_li.slabs.kstar_weight_threshold`).
    ``residual_tol`` is the tolerance K*'s rows were accepted with and
    ``noise`` the label noise σ̂ it follows, estimated from the stream's head
    (:mod:`~mhalearn.learners.chen_li.noise`), and ``noise_samples`` the
    sequences that estimate read (25 000, or up to 1.6·10⁶ where agreement
    rows are rare); both None for the quantile rule, or when
    ``estimate_noise`` is off.
    Data: the rows, the slabs and, for the quantile rule, the pool of
    candidates our alternating refit starts from.
    """

    rule: str
    accepted_rows: int
    found_rows: int
    accepted_fraction: float
    slab_threshold: float
    equalities: int
    halfspaces: int
    residual_tol: float | None = None
    noise: float | None = None
    noise_samples: int | None = None
    rows: AgreementRows = data_field()
    slabs: SlabSystem = data_field()
    pool: AgreementRows | None = data_field()

    columns = ("rule", "accepted_rows", "found_rows", "slab_threshold", "equalities", "halfspaces", "residual_tol",
               "noise", "noise_samples")


def sculpt_body(source, w_sum: np.ndarray, heads: int, settings: BodySettings, rng: np.random.Generator, *,
                rule: str, candidates: AgreementRows | None = None) -> SculptedBody:
    """Phase 2: decode every row of ``source`` with Ŵ_Σ, accept the agreement rows, build their slabs.

    ``rule="quantile"`` (crude Ŵ_Σ): one pass draws a pool of the best
    ``pool_fraction`` of each block (kept for phase 3) and accepts its best
    rows, the share ``quantile`` of all rows.  ``rule="absolute"`` (refined
    Ŵ_Σ): rows whose relative residual is ≤ ``residual_tol``, widened to the
    label noise estimated from the stream's head when ``estimate_noise``
    (:func:`~mhalearn.learners.chen_li.noise.estimate_tolerance`), up to
    ``max_candidate_rows`` found
    (:func:`~mhalearn.learners.chen_li.agreement_passes.first_agreement_rows`)
    — the rows of K*; with ``candidates``, the rows of a candidate pass that
    hold every row Ŵ_Σ can accept
    (:class:`~mhalearn.learners.chen_li.alternating_refit.StreamRefit`), every
    one of them that passes, found without reading the stream.  K* reads
    them in order until their slabs at its threshold (the rule's on all of
    them) reach ``kstar_max_slabs``, or what a quarter of the memory budget
    holds (:func:`~mhalearn.learners.chen_li.slabs.kstar_slab_cap`,
    :func:`~mhalearn.learners.chen_li.slabs.rows_within_slabs`); it holds
    those rows' slabs and the half-spaces of the first ``max_rows``.
    """
    start = time.perf_counter()
    pool, tolerance, noise, noise_samples = None, None, None, None
    if rule == "absolute":
        tolerance = settings.residual_tol
        if settings.estimate_noise:
            found = estimate_tolerance(source, w_sum, residual_tol=settings.residual_tol,
                                       simplex_tol=settings.simplex_tol, agreement_share=settings.quantile_for(heads))
            tolerance, noise, noise_samples = found["tolerance"], found["noise"], found["samples"]
    if rule == "quantile":
        quantile, pool_fraction = settings.quantile_for(heads), settings.pool_fraction_for(heads)
        pool = draw_pool(source, w_sum, pool_fraction=pool_fraction, simplex_tol=settings.simplex_tol,
                         max_pool=settings.max_pool_for(heads), min_share=settings.first_pool_share, rng=rng)
        accepted = pool.best(min(math.ceil(quantile * pool.scanned), settings.max_rows),
                             simplex_tol=settings.simplex_tol)
    elif rule == "absolute" and candidates is not None:
        accepted = candidates.accepted_under(w_sum, residual_tol=tolerance, simplex_tol=settings.simplex_tol,
                                             max_rows=settings.max_candidate_rows)
    elif rule == "absolute":
        accepted = first_agreement_rows(source, w_sum, residual_tol=tolerance, simplex_tol=settings.simplex_tol,
                                        max_rows=settings.max_candidate_rows, rng=rng)
    else:
        raise ValueError(f"rule: expected 'quantile' or 'absolute', received {rule!r}")
    if rule == "quantile":
        slab_rule, halfspace_rows = settings.slab_rule(), None
    else:
        # K* reads the rows it found until their slabs reach kstar_max_slabs; phase 4 reads its slabs alone,
        # so only the first max_rows rows give half-spaces (d² numbers for each of a row's negligible tokens).
        slab_rule, halfspace_rows = kstar_slab_rule(accepted, settings), settings.max_rows
        accepted = rows_within_slabs(accepted, slab_rule["w_min"], kstar_slab_cap(settings, accepted.tokens.shape[-1]))
    slabs = slab_constraints(accepted, **slab_rule, halfspace_rows=halfspace_rows)
    return SculptedBody(seconds=time.perf_counter() - start, rule=rule, accepted_rows=len(accepted),
                        found_rows=int(accepted.found), accepted_fraction=float(accepted.fraction),
                        slab_threshold=slab_rule["w_min"], equalities=slabs.equalities, halfspaces=len(slabs.g),
                        residual_tol=tolerance, noise=noise, noise_samples=noise_samples, rows=accepted, slabs=slabs,
                        pool=pool)
