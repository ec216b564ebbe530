"""Phase 4 of Chen & Li's learner: read span{Θ_i} off the re-sculpted body K*.

Phase 2, run again with the refined Ŵ_Σ and an absolute tolerance, gives
the slabs of K*.  Every Θ_i, and every affine combination of them, satisfies
them, so K* is long along aff{Θ_i} (dimension m − 1) and thin across it:
its m − 1 long directions and a point on aff{Θ_i} (its centre, or its
minimum-norm point Θ̄*) span {Θ_i} (:func:`read_span`).  The body refuses
— and the learner falls back to our moment route — when K* holds too few
slabs to fix a hull or its long directions are not clearly separated from
the thin ones.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..moment_route import sine_distance
from ..report import PhaseResult, data_field
from .body import ConvexBody
from .settings import BodySettings
from .slabs import SlabSystem

#: Eigenvalues of the normal matrix below this share of the largest are rounding, not information.
_EIGEN_FLOOR = 1e-13


def read_affine_hull(slabs: SlabSystem, heads: int, weights: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, dict]:
    """The affine hull of the Θ_i as the slab system sees it.

    Scaled to unit half-widths, the slabs read (E/t)θ ≈ b/t.  Its m − 1
    right singular vectors with the smallest singular values are the body's
    *long directions*: moving along them changes no log-ratio, as moving
    from one Θ_i to another does not on an agreement row.  The *centre* is
    the minimum-norm least-squares solution across the other directions:
    the minimum-norm point of the body's central affine set, which lies on
    aff{Θ_i} up to the decoding's error (the minimum-norm point of K itself
    sits on K's boundary, pulled towards 0 by the slabs' half-widths).

    ``weights`` (one per slab, default 1) weigh the slabs' equations: 0
    leaves a slab out, 2 counts it twice (a bootstrap resample).  The right
    singular vectors and values come from the eigendecomposition of the
    d² × d² normal matrix (E/t)ᵀW(E/t), formed as (√W E/t)ᵀ(√W E/t) over the
    slabs of positive weight: one symmetric product over the slabs
    instead of an SVD of the tall slab matrix, and exact enough for
    singular values down to ~10⁻⁷ of the largest (the long directions sit at
    10⁻³–10⁻¹).

    Returns the centre (d²,), the long directions (m − 1, d²) and the
    singular values relative to the largest (the last m + 2), with the gap
    σ_m / σ_{m−1} between the first thin and the last long direction,
    counted from the smallest (inf at m = 1), and ``inverse_trace``:
    tr((E/t)ᵀW(E/t))⁺ over the thin directions, the sum of the squared
    errors the reading would have with unit independent errors on the
    scaled equations, and ``rank``, how many thin directions the equations
    reach (:func:`bootstrap_span_error` compares them between row sets).
    """
    scaled_E, scaled_b = slabs.weighted_equalities()
    if weights is not None:  # √w on the slabs weighed: (√w E)ᵀ(√w E) = EᵀWE, and a slab left out costs nothing
        used = np.flatnonzero(weights)
        root = np.sqrt(weights[used])
        scaled_E, scaled_b = scaled_E[used] * root[:, None], scaled_b[used] * root
    # AᵀA of one array is a symmetric rank-k update (BLAS syrk): half the work of a general product.
    eigenvalues, vectors = np.linalg.eigh(scaled_E.T @ scaled_E)
    singular = np.sqrt(np.maximum(eigenvalues[::-1], 0.0))
    right = vectors[:, ::-1].T
    thin = len(singular) - (heads - 1)
    # Minimum-norm least squares: directions the equations do not reach (eigenvalues below the
    # normal matrix's rounding, as in a resample of few rows) get no component.
    squares = singular[:thin] ** 2
    inverse = np.divide(1.0, squares, out=np.zeros_like(squares), where=squares > _EIGEN_FLOOR * squares[0])
    centre = right[:thin].T @ ((right[:thin] @ (scaled_E.T @ scaled_b)) * inverse)
    long_directions = right[thin:]
    relative = singular / singular[0]
    gap = float(relative[thin - 1] / relative[thin]) if heads > 1 and relative[thin] > 0 else math.inf
    return centre, long_directions, {"singular_values": relative[-(heads + 2):].tolist(), "spectral_gap": gap,
                                     "inverse_trace": float(np.sum(inverse)), "rank": int(np.count_nonzero(inverse))}


def hull_residuals(slabs: SlabSystem, centre: np.ndarray, long_directions: np.ndarray) -> np.ndarray:
    """How far each accepted row's slabs are from holding on the whole hull, one value per row.

    On a true agreement row every point of aff{Θ_i} satisfies the row's
    log-ratios, so its scaled slabs (E/t)θ ≈ b/t hold at the centre and do
    not change along the long directions.  A slab's residual is
    ``|(E/t)·centre − b/t|`` plus ‖(E/t)Lᵀ‖·‖centre‖ (its change over a move as
    long as the centre's norm, the scale of the heads); a row's is the
    largest of its slabs' (0 for a row with none).
    """
    scaled_E, scaled_b = slabs.weighted_equalities()
    residual = np.abs(scaled_E @ centre - scaled_b)
    if len(long_directions):
        residual += np.linalg.norm(scaled_E @ long_directions.T, axis=1) * np.linalg.norm(centre)
    rows = np.zeros(slabs.row_count())
    np.maximum.at(rows, slabs.slab_row, residual)
    return rows


def trimmed_affine_hull(slabs: SlabSystem, heads: int, *, trim: float, core: float = 1.0, rounds: int = 10):
    """The affine hull read after discarding the rows that disagree with it (a robust :func:`read_affine_hull`).

    Some accepted rows are not agreement rows (their heads' patterns differ
    by more than the decoding can see); their slabs pull the least-squares
    hull off aff{Θ_i}, and a fifth of such rows (m = 4) hold it there however
    many rows are added.  Two steps, each a fixed point of reading the hull
    from a set of rows and ranking every row by its :func:`hull_residuals`:

    1. the *core* (``core`` < 1): the share ``core`` of the rows with the
       smallest residuals under the hull read from the core itself (least
       trimmed squares by concentration steps, from every row), so that up
       to 1 − ``core`` of rows inconsistent with the rest cannot steer the
       hull the core reads;
    2. the *kept* rows: those whose residuals are at most ``trim`` times the
       median of the kept rows' (starting from the core), which gives back the
       rows the core left out but the hull explains as well as its own.

    Each step stops when its rows stop changing (at most ``rounds`` times),
    or when they would fix fewer than d² equations.

    Returns the centre, the long directions, the singular-value figures
    (:func:`read_affine_hull`), the indices of the kept rows and ``discarded``:
    how many rows with slabs left the hull, by reason.
    """
    candidates = np.unique(slabs.slab_row)
    kept = candidates
    if core < 1.0 and len(candidates):
        size = max(int(math.ceil(core * len(candidates))), 1)
        for _ in range(rounds):
            centre, long_directions, _ = read_affine_hull(slabs, heads, slabs.row_weights(kept))
            residual = hull_residuals(slabs, centre, long_directions)[candidates]
            survivors = np.sort(candidates[np.argsort(residual, kind="stable")[:size]])
            if np.array_equal(survivors, kept) or np.sum(slabs.row_weights(survivors)) < slabs.E.shape[1]:
                break
            kept = survivors
    core_rows = kept
    for _ in range(rounds):
        centre, long_directions, info = read_affine_hull(slabs, heads, slabs.row_weights(kept))
        residual = hull_residuals(slabs, centre, long_directions)
        survivors = candidates[residual[candidates] <= trim * np.median(residual[kept])]
        if np.array_equal(survivors, kept) or np.sum(slabs.row_weights(survivors)) < slabs.E.shape[1]:
            break
        kept = survivors
    else:
        centre, long_directions, info = read_affine_hull(slabs, heads, slabs.row_weights(kept))
    dropped = np.setdiff1d(candidates, kept)
    discarded = {
        "outside the core, and its hull's residual above the cut": int(len(np.setdiff1d(dropped, core_rows))),
        "in the core, yet its hull's residual above the cut": int(len(np.intersect1d(dropped, core_rows))),
    }
    return centre, long_directions, info, kept, discarded


def subsample_rows(rows: np.ndarray, equations: np.ndarray, unknowns: int) -> int:
    """How many of ``rows`` (each giving ``equations[row]`` slabs) a subsample draws: about
    (N + p) / 2 equations of the N they give, p = ``unknowns``, at least one row and one row fewer than all."""
    total = float(np.sum(equations[rows]))
    share = 0.5 * (total + unknowns) / total
    return int(min(max(round(share * len(rows)), 1), len(rows) - 1))


def bootstrap_span_error(slabs: SlabSystem, rows: np.ndarray, basis: np.ndarray, heads: int, *,
                         resamples: int, level: float, rng: np.random.Generator, full: dict | None = None) -> float:
    """An estimate of the span's error from the data: a quantile of subsampled, rescaled span distances.

    Reads the span from ``resamples`` subsamples of the kept rows drawn
    without replacement and returns the ``level`` quantile of
    sin(largest principal angle) between each and ``basis`` (the span read
    from all kept rows), each multiplied by √(T_N / (T_h − T_N)), T_h and T_N
    the ``inverse_trace`` of the subsample's and of all kept rows' scaled
    equations (:func:`read_affine_hull`).

    Why this factor: the body's centre and long directions are least-squares
    readings of the scaled equations (E/t)θ ≈ b/t (a row off the hull moves
    them as a residual does).  For least squares with the equations fixed
    and independent unit errors, the full reading's error has
    E‖θ̂_N − θ‖² = tr A⁻¹ = T_N (A = (E/t)ᵀ(E/t) over the rows), and a
    subsample's reading, nested in the full one (Cov(θ̂_h, θ̂_N) = A⁻¹),
    differs from it by E‖θ̂_h − θ̂_N‖² = tr A_h⁻¹ − tr A⁻¹ = T_h − T_N; the
    factor turns the one into the other for the subsample actually drawn,
    whatever the rows' design.  The textbook shortcut for a Gaussian
    design, (N_h − p)/(N − N_h) in equations, is 1 at N_h = (N + p)/2; K*'s
    design is far from Gaussian (up to k − 1 equations per row share one
    query token and one top token, the tokens are Boolean), and the
    subsample's T_h runs higher than that formula says: on the development
    slabs T_N/(T_h − T_N) is 0.53–0.65 where the shortcut gives 1, which made
    that estimate read 1.25–1.37× high.  As the rows grow, A_h → A/2 and the
    factor returns to the shortcut's 1 at half the rows.  The subsamples take
    about (N + p)/2 equations (:func:`subsample_rows`), never so few that a
    subsample's hull is ill-posed.  Like any resampling, it measures the
    spread the rows' sampling and decoding put into the span, not a bias
    shared by every subsample; ``level`` above 0.5 makes it an upper bound
    (0.9: about 1.15× the median of the spread).  ``full``: the figures of
    ``rows``' own reading when the caller has read it (read here otherwise).
    """
    return span_error_quantile(scaled_subsample_distances(slabs, rows, basis, heads, resamples=resamples, rng=rng,
                                                          full=full), level)


def scaled_subsample_distances(slabs: SlabSystem, rows: np.ndarray, basis: np.ndarray, heads: int, *,
                               resamples: int, rng: np.random.Generator, full: dict | None = None) -> np.ndarray:
    """The subsamples' span distances of :func:`bootstrap_span_error`, each scaled by √(T_N / (T_h − T_N)).

    Only the subsamples that read every direction all rows read are
    returned (one that leaves a direction unread tells nothing of the full
    rows' error); empty when none does.
    """
    distances, factors, _ = subsample_span_distances(slabs, rows, basis, heads, resamples=resamples, rng=rng,
                                                     full=full)
    counted = factors > 0
    return distances[counted] * np.sqrt(factors[counted])


def span_error_quantile(scaled: np.ndarray, level: float) -> float:
    """The ``level`` quantile of :func:`scaled_subsample_distances`' ``scaled``, at most 1 (1 when empty).

    A sine is at most 1; the scale can carry a far subsample past it (an
    estimate that refuses either way).  No subsample that reads every
    direction: the rows cannot judge their own error, and the estimate is 1.
    """
    if not len(scaled):
        return 1.0
    return min(float(np.quantile(scaled, level)), 1.0)


def subsample_span_distances(slabs: SlabSystem, rows: np.ndarray, basis: np.ndarray, heads: int, *,
                             resamples: int, rng: np.random.Generator, full: dict | None = None
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The subsamples of :func:`bootstrap_span_error`, each read alone.

    Returns, per subsample of ``rows`` (drawn without replacement, of
    :func:`subsample_rows` rows): the span distance between its span and
    ``basis``, unscaled; the design's factor T_N / (T_h − T_N) on squared
    distances (0 when the subsample leaves a direction unread that all rows
    read: T_h is then unbounded); and the equations it holds.  ``full`` is
    :func:`read_affine_hull`'s figures for all ``rows`` (their ``inverse_trace``
    and ``rank``), read here when not given.
    """
    unknowns = slabs.E.shape[1]
    equations = np.bincount(slabs.slab_row, minlength=slabs.row_count()).astype(np.float64)
    size = subsample_rows(rows, equations, unknowns)
    if full is None:
        full = read_affine_hull(slabs, heads, slabs.row_weights(rows))[2]
    distances, factors, drawn_equations = np.zeros(resamples), np.zeros(resamples), np.zeros(resamples)
    for index in range(resamples):
        drawn = rng.choice(rows, size, replace=False)
        centre, long_directions, info = read_affine_hull(slabs, heads, slabs.row_weights(drawn))
        spread = info["inverse_trace"] - full["inverse_trace"]
        distances[index] = sine_distance(span_basis(centre, long_directions, heads), basis)
        drawn_equations[index] = np.sum(equations[drawn])
        if info["rank"] == full["rank"] and spread > 0:
            factors[index] = full["inverse_trace"] / spread
    return distances, factors, drawn_equations


def span_basis(point: np.ndarray, long_directions: np.ndarray, heads: int) -> np.ndarray:
    """Orthonormal basis (m, d²) of span{point} + span{long directions}."""
    stack = np.vstack([point[None, :], long_directions])
    return np.linalg.svd(stack, full_matrices=False)[2][:heads]


@dataclass(frozen=True, kw_only=True)
class SpanReading(PhaseResult):
    """Phase 4's result: span{Θ_i} read from K*, and whether the body refuses it.

    ``refused`` is None when the span is used, and ``refused_by`` names the
    rule that refused: ``"shape"`` (d ≤ k), ``"equalities"`` (too few
    slabs), ``"median"``, ``"bound"``, ``"min_norm"`` or ``"gap"``.  ``median_error`` is the
    subsampling estimate of the span's error, the median of the rescaled
    subsample distances (:func:`scaled_subsample_distances`); the body
    refuses when it exceeds ``max_span_error``.  ``estimated_error`` is
    their ``bootstrap_level`` quantile (:func:`bootstrap_span_error`), an
    upper bound of the error; the body refuses when it exceeds
    ``max_span_bound``, and the route rule reads it.
    ``spectral_gap`` is σ_m/σ_{m−1} of the scaled slab matrix (inf at
    m = 1), ``singular_values`` its smallest m + 2 relative to the largest;
    ``rows``/``kept_rows`` the accepted rows of K* with slabs and those the
    trimmed hull kept, ``discarded`` how many rows with slabs it left out,
    by reason (:func:`trimmed_affine_hull`); ``head_norm`` the norm of the point that completes the
    span (it sets the net's radius).  Data: the orthonormal ``basis`` (m,
    d²) — read even when refused, so an observer can judge the refusal —,
    the centre, the point that completes the span (the centre, or K*'s
    minimum-norm point), the long directions, the kept rows' indices and the
    slabs of K*.  ``hull`` is the affine hull the body reads: the point and
    the long directions.
    """

    refused: str | None = None
    refused_by: str | None = None
    equalities: int | None = None
    needed: int | None = None
    rows: int | None = None
    kept_rows: int | None = None
    discarded: dict | None = None
    estimated_error: float | None = None
    median_error: float | None = None
    spectral_gap: float | None = None
    singular_values: list | None = None
    span_point: str | None = None
    min_norm_status: str | None = None
    head_norm: float | None = None
    basis: np.ndarray | None = data_field()
    centre: np.ndarray | None = data_field()
    point: np.ndarray | None = data_field()
    long_directions: np.ndarray | None = data_field()
    kept: np.ndarray | None = data_field()
    slabs: SlabSystem | None = data_field()

    columns = ("refused", "median_error", "estimated_error", "kept_rows", "rows", "spectral_gap", "equalities",
               "span_point")

    @property
    def hull(self) -> tuple[np.ndarray, np.ndarray]:
        """aff{Θ_i} as the body reads it: (a point on it (d²,), its long directions (m − 1, d²))."""
        return self.point, self.long_directions


def read_span(slabs: SlabSystem, heads: int, settings: BodySettings, rng: np.random.Generator) -> SpanReading:
    """Phase 4: K*'s long directions and the point that completes them, or a refusal.

    Refuses with fewer than ``settings.equalities_needed(d)`` slabs; reads
    the hull from the rows consistent with it (:func:`trimmed_affine_hull`, ``hull_core``
    and ``hull_trim``);
    refuses when the subsampling estimate of the span's error, the median
    of ``bootstrap_resamples`` rescaled subsample distances
    (:func:`scaled_subsample_distances`), exceeds ``max_span_error``, when
    their ``bootstrap_level`` quantile (:func:`bootstrap_span_error`, an
    upper bound) exceeds ``max_span_bound``, or at m ≥ 2 when the spectral
    gap is below ``min_gap``; with ``span_point="min_norm"`` also when K*'s
    minimum-norm problem fails.  The median decides near ``max_span_error``:
    an upper bound refuses spans a little under its threshold by
    construction ([decision: span-refusal]).  ``rng`` draws the estimate's
    subsamples and subsamples K*'s constraints for the minimum-norm problem.
    """
    start = time.perf_counter()
    dim = int(round(math.sqrt(slabs.E.shape[1])))
    needed = settings.equalities_needed(dim)
    counts = {"equalities": slabs.equalities, "needed": needed, "span_point": settings.span_point, "slabs": slabs}
    if slabs.equalities < needed:
        return SpanReading(seconds=time.perf_counter() - start, refused_by="equalities",
                           refused=f"too few equalities ({slabs.equalities} < {needed})", **counts)
    centre, long_directions, info, kept, discarded = trimmed_affine_hull(slabs, heads, trim=settings.hull_trim,
                                                                         core=settings.hull_core)
    point, refused, refused_by = centre, None, None
    if settings.span_point == "min_norm":
        body = ConvexBody(slabs.of_rows(kept), settings.norm_bound, max_constraints=settings.max_constraints,
                          rng=rng)
        point, solve = body.min_norm_point()
        counts["min_norm_status"] = solve["solver_status"]
        if point is None:
            point, refused = centre, f"minimum-norm problem of K* {solve['solver_status']}"
            refused_by = "min_norm"
    basis = span_basis(point, long_directions, heads)
    # info is the reading of exactly the kept rows (trimmed_affine_hull's last): not read a second time.
    scaled = scaled_subsample_distances(slabs, kept, basis, heads, resamples=settings.bootstrap_resamples, rng=rng,
                                        full=info)
    median, estimate = span_error_quantile(scaled, 0.5), span_error_quantile(scaled, settings.bootstrap_level)
    if refused is None and median > settings.max_span_error:
        refused, refused_by = f"estimated span error {median:.3f} (median) > {settings.max_span_error}", "median"
    if refused is None and estimate > settings.max_span_bound:
        refused = (f"upper bound of the span error {estimate:.3f} (level {settings.bootstrap_level}) > "
                   f"{settings.max_span_bound}")
        refused_by = "bound"
    if refused is None and heads > 1 and info["spectral_gap"] < settings.min_gap:
        refused = f"no clear long directions (gap {info['spectral_gap']:.2f} < {settings.min_gap})"
        refused_by = "gap"
    counts.update(singular_values=info["singular_values"], spectral_gap=info["spectral_gap"], centre=centre,
                  point=point, long_directions=long_directions, kept=kept, rows=len(np.unique(slabs.slab_row)),
                  kept_rows=len(kept), discarded=discarded)
    return SpanReading(seconds=time.perf_counter() - start, refused=refused, refused_by=refused_by,
                       estimated_error=estimate, median_error=median,
                       head_norm=max(float(np.linalg.norm(point)), 1e-3), basis=basis, **counts)
