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

from ..report import PhaseResult, data_field
from .body import ConvexBody
from .phase2_sculpt import SlabSystem
from .settings import BodySettings


def read_affine_hull(slabs: SlabSystem, heads: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """The affine hull of the Θ_i as the slab system sees it.

    Scaled to unit half-widths, the slabs read (E/t)θ ≈ b/t.  Its m − 1
    right singular vectors with the smallest singular values are the body's
    *long directions*: moving along them changes no log-ratio, as moving
    from one Θ_i to another does not on an agreement row.  The *centre* is
    the minimum-norm least-squares solution across the other directions:
    the minimum-norm point of the body's central affine set, which lies on
    aff{Θ_i} up to the decoding's error (the minimum-norm point of K itself
    sits on K's boundary, pulled towards 0 by the slabs' half-widths).

    Returns the centre (d²,), the long directions (m − 1, d²) and the
    singular values relative to the largest (the last m + 2), with the gap
    σ_m / σ_{m−1} between the first thin and the last long direction,
    counted from the smallest (inf at m = 1).
    """
    scaled_E, scaled_b = slabs.weighted_equalities()
    left, singular, right = np.linalg.svd(scaled_E, full_matrices=False)
    thin = len(singular) - (heads - 1)
    centre = right[:thin].T @ ((left[:, :thin].T @ scaled_b) / singular[:thin])
    long_directions = right[thin:]
    relative = singular / singular[0]
    gap = float(relative[thin - 1] / relative[thin]) if heads > 1 and relative[thin] > 0 else math.inf
    return centre, long_directions, {"singular_values": relative[-(heads + 2):].tolist(), "spectral_gap": gap}


def span_basis(point: np.ndarray, long_directions: np.ndarray, heads: int) -> np.ndarray:
    """Orthonormal basis (m, d²) of span{point} + span{long directions}."""
    stack = np.vstack([point[None, :], long_directions])
    return np.linalg.svd(stack, full_matrices=False)[2][:heads]


@dataclass(frozen=True, kw_only=True)
class SpanReading(PhaseResult):
    """Phase 4's result: span{Θ_i} read from K*, or why the body refused.

    ``refused`` is None when the span was read.  ``spectral_gap`` is
    σ_m/σ_{m−1} of the scaled slab matrix (inf at m = 1), ``singular_values``
    its smallest m + 2 relative to the largest; ``head_norm`` the norm of the
    point that completes the span (it sets the net's radius).  Data: the
    orthonormal ``basis`` (m, d²), the centre, the long directions and the
    slabs of K*.
    """

    refused: str | None = None
    equalities: int | None = None
    needed: int | None = None
    spectral_gap: float | None = None
    singular_values: list | None = None
    span_point: str | None = None
    min_norm_status: str | None = None
    head_norm: float | None = None
    basis: np.ndarray | None = data_field()
    centre: np.ndarray | None = data_field()
    long_directions: np.ndarray | None = data_field()
    slabs: SlabSystem | None = data_field()

    columns = ("refused", "spectral_gap", "equalities", "needed", "span_point")


def read_span(slabs: SlabSystem, heads: int, settings: BodySettings, rng: np.random.Generator) -> SpanReading:
    """Phase 4: K*'s long directions and the point that completes them, or a refusal.

    Refuses with fewer than ``settings.equalities_needed(d)`` slabs, and at
    m ≥ 2 when the spectral gap is below ``min_gap``; with
    ``span_point="min_norm"`` also when K*'s minimum-norm problem fails.
    ``rng`` subsamples K*'s constraints for that problem (only then).
    """
    start = time.perf_counter()
    dim = int(round(math.sqrt(slabs.E.shape[1])))
    needed = settings.equalities_needed(dim)
    counts = {"equalities": slabs.equalities, "needed": needed, "span_point": settings.span_point, "slabs": slabs}
    if slabs.equalities < needed:
        return SpanReading(seconds=time.perf_counter() - start,
                           refused=f"too few equalities ({slabs.equalities} < {needed})", **counts)
    centre, long_directions, info = read_affine_hull(slabs, heads)
    counts.update(info, centre=centre, long_directions=long_directions)
    if heads > 1 and info["spectral_gap"] < settings.min_gap:
        return SpanReading(seconds=time.perf_counter() - start, refused=(
            f"no clear long directions (gap {info['spectral_gap']:.2f} < {settings.min_gap})"), **counts)
    point = centre
    if settings.span_point == "min_norm":
        body = ConvexBody(slabs, settings.norm_bound, max_constraints=settings.max_constraints, rng=rng)
        point, solve = body.min_norm_point()
        counts["min_norm_status"] = solve["solver_status"]
        if point is None:
            return SpanReading(seconds=time.perf_counter() - start, refused=(
                f"minimum-norm problem of K* {solve['solver_status']}"), **counts)
    return SpanReading(seconds=time.perf_counter() - start, head_norm=max(float(np.linalg.norm(point)), 1e-3),
                       basis=span_basis(point, long_directions, heads), **counts)
