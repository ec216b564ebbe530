"""The hyper-parameters of Chen & Li's six phases, as two frozen settings objects.

:class:`BodySettings` holds those of phases 1–4 (the body) and
:class:`SearchSettings` those of phases 5–6 (the net and the selection);
:class:`~mhalearn.SculptLearner` documents each one and builds both from its
parameters, :class:`~mhalearn.MomentLearner` the second.

The defaults here are the only ones: the learners' signatures read theirs
from these classes, the phases and their helpers take every setting from the
caller, and tests/test_settings.py fails when a learner's default parts from
its setting's.  They were chosen on development instances seeded 500–505,
d = 12, k = 4, n = 10⁵ (docs/chen_li.md says where they were tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._validation import Boolean, Integer, Options, Real, check_allowed

#: An upper bound on every ‖Θ_i‖_F: the radius of the body's norm ball (phases 3–4) and of the net (phase 5),
#: one parameter of the learner shared by both settings.
NORM_BOUND = 12.0


#: What each of :class:`BodySettings`' values may be, checked when the settings are made and by
#: :class:`~mhalearn.SculptLearner` at the start of ``fit`` (its parameters of the same names).
BODY_CONSTRAINTS = {
    "quantile": [None, Real(0.0, 1.0, low_open=True)],
    "residual_tol": [Real(0.0, low_open=True)],
    "estimate_noise": [Boolean()],
    "simplex_tol": [Real(0.0)],
    "w_min": [Real(0.0, 1.0, low_open=True, high_open=True)],
    "kstar_slabs": [None, Integer(1)],
    "kstar_w_max": [Real(0.0, 1.0, low_open=True, high_open=True)],
    "slab_width": [Real(0.0)],
    "slab_floor": [Real(0.0)],
    "max_rows": [Integer(1)],
    "kstar_max_slabs": [Integer(1)],
    "max_constraints": [Integer(1)],
    "eta": [Real(0.0, 0.5, low_open=True, high_open=True)],
    "refit_iterations": [Integer(0)],
    "refit_rows": [Integer(1)],
    "refit_rounds": [Integer(1)],
    "pool_fraction": [Real(0.0, 1.0, low_open=True)],
    "first_pool_share": [Real(0.0, 1.0)],
    "prefix_samples": [None, Integer(1)],
    "candidate_radius": [Real(0.0)],
    "max_candidate_rows": [Integer(1)],
    "min_equalities": [None, Integer(1)],
    "min_gap": [Real(1.0)],
    "hull_trim": [Real(1.0, low_open=True)],
    "hull_core": [Real(0.0, 1.0, low_open=True)],
    "max_span_error": [Real(0.0, 1.0, low_open=True)],
    "max_span_bound": [Real(0.0, 1.0, low_open=True)],
    "bootstrap_resamples": [Integer(2)],
    "bootstrap_level": [Real(0.0, 1.0)],
    "compare_routes_above": [Real(0.0, 1.0)],
    "span_point": [Options("centre", "min_norm")],
    "norm_bound": [Real(0.0, low_open=True)],
}

#: Settings of :class:`BodySettings` that :class:`~mhalearn.SculptLearner` has no parameter for, at their defaults
#: in every fit (``settings_from``'s ``unused``).
BODY_SETTINGS_WITHOUT_PARAMETER = ("kstar_max_slabs",)

#: What each of :class:`SearchSettings`' values may be (checked likewise; the learners' parameters of the
#: same names share them).
SEARCH_SETTING_CONSTRAINTS = {
    "search": [Options("net", "multistart")],
    "net_radius": [None, Real(0.0, low_open=True)],
    "net_resolution": [None, Real(0.0, low_open=True)],
    "max_candidates": [Integer(1)],
    "net_slab": [None, Real(0.0, low_open=True)],
    "score_samples": [Integer(1)],
    # Phase 6 solves least squares on every training sequence for each kept candidate, then polishes it.
    "keep": [Integer(1, 1000)],
    "refine": [Options("lbfgs", "none")],
    "refine_iter": [Integer(1)],
    "delta": [Real(0.0, 1.0, low_open=True, high_open=True)],
    "norm_bound": [Real(0.0, low_open=True)],
}


def check_settings(settings, constraints: dict) -> None:
    """Raise ``ValueError`` naming the first setting of ``settings`` that ``constraints`` do not allow."""
    for name in settings.__dataclass_fields__:
        check_allowed(getattr(settings, name), name, constraints[name])


@dataclass(frozen=True)
class BodySettings:
    """Hyper-parameters of phases 1–4 (see :class:`~mhalearn.SculptLearner` for each)."""

    quantile: float | None = None
    residual_tol: float = 0.02
    estimate_noise: bool = True
    simplex_tol: float = 0.02
    w_min: float = 0.02
    kstar_slabs: int | None = None
    kstar_w_max: float = 0.1
    slab_width: float = 20.0
    slab_floor: float = 0.02
    max_rows: int = 20_000
    kstar_max_slabs: int = 250_000
    max_constraints: int = 1500
    eta: float = 0.05
    refit_iterations: int = 100
    refit_rows: int = 4000
    refit_rounds: int = 4
    pool_fraction: float = 0.1
    first_pool_share: float = 0.005
    prefix_samples: int | None = None
    candidate_radius: float = 0.02
    max_candidate_rows: int = 2_000_000
    min_equalities: int | None = None
    min_gap: float = 1.75
    hull_trim: float = 3.0
    hull_core: float = 1.0
    max_span_error: float = 0.15
    max_span_bound: float = 0.2
    bootstrap_resamples: int = 24
    bootstrap_level: float = 0.9
    compare_routes_above: float = 0.07
    span_point: str = "centre"
    norm_bound: float = NORM_BOUND

    def __post_init__(self):
        check_settings(self, BODY_CONSTRAINTS)
        if self.kstar_w_max < self.w_min:
            raise ValueError(f"kstar_w_max = {self.kstar_w_max} is below w_min = {self.w_min}: K*'s weight "
                             "threshold rises from w_min to kstar_w_max")

    def quantile_for(self, heads: int) -> float:
        """The quantile, by default 1 at m = 1 (every row agrees) and 0.01 otherwise."""
        if self.quantile is not None:
            return self.quantile
        return 1.0 if heads == 1 else 0.01

    def pool_fraction_for(self, heads: int) -> float:
        """The share of rows kept as candidates for our alternating refit (never below the quantile)."""
        return max(self.pool_fraction, self.quantile_for(heads))

    def max_pool_for(self, heads: int) -> int:
        """Pool rows such that each alternating iteration accepts about ``max_rows`` of them."""
        return int(self.max_rows * self.pool_fraction_for(heads) / self.quantile_for(heads))

    def prefix_for(self, heads: int, length: int) -> int | None:
        """Sequences phases 1–3 read (None: all of them): ``prefix_samples``, by default the shortest
        stream whose best ``first_pool_share`` of rows fills the first pool (10⁷ sequences at m ≥ 2,
        k = 4), beyond which the first pool is a random share of those rows however long the stream."""
        if self.prefix_samples is not None:
            return self.prefix_samples
        if self.first_pool_share <= 0.0:
            return None
        return math.ceil(self.max_pool_for(heads) / (self.first_pool_share * length))

    def slab_rule(self) -> dict:
        """The slab rule's parameters under the paper's names, those of phase 2's ``slab_constraints``:
        the one place ``slab_width`` becomes κ (``kappa``) and ``slab_floor`` becomes ``t_min``."""
        return {"w_min": self.w_min, "kappa": self.slab_width, "t_min": self.slab_floor}

    def kstar_slabs_for(self, dim: int) -> int:
        """Slabs K*'s weight threshold leaves at least: ``kstar_slabs``, by default four times
        :meth:`equalities_needed` (8d²)."""
        return self.kstar_slabs if self.kstar_slabs is not None else 4 * self.equalities_needed(dim)

    def equalities_needed(self, dim: int) -> int:
        """Slabs K* must hold to be read: ``min_equalities`` (default 2d²), never fewer than d²,
        since fewer than d² equations cannot fix a hull in R^(d²)."""
        return max(self.min_equalities or 2 * dim * dim, dim * dim)


@dataclass(frozen=True)
class SearchSettings:
    """Hyper-parameters of phases 5–6 (see :class:`~mhalearn.SculptLearner` for each)."""

    search: str = "net"
    net_radius: float | None = None
    net_resolution: float | None = None
    max_candidates: int = 200_000
    net_slab: float | None = 0.05
    score_samples: int = 256
    keep: int = 4
    refine: str = "lbfgs"
    refine_iter: int = 2000
    delta: float = 0.05
    norm_bound: float = NORM_BOUND

    def __post_init__(self):
        check_settings(self, SEARCH_SETTING_CONSTRAINTS)

    def radius(self, head_norm: float, heads_in_norm: int) -> float:
        """The net's radius: ``net_radius``, or 1.5·√(heads_in_norm)·head_norm within [1, norm_bound].

        ``head_norm`` is the norm of the point the span was read from: at the
        body's centre, the centroid of m orthogonal heads of equal norm, whose
        heads have √m times its norm (``heads_in_norm = m``); for the moment
        route, one head's estimated norm (``heads_in_norm = 1``).  The 1.5
        leaves room for unequal heads.
        """
        if self.net_radius is not None:
            return self.net_radius
        return float(np.clip(1.5 * math.sqrt(heads_in_norm) * head_norm, 1.0, self.norm_bound))


def settings_from(settings_class, estimator, *, unused: tuple = ()) -> object:
    """``settings_class`` filled from the estimator's parameters of the same names.

    Every setting must be a parameter of the estimator, except those named in
    ``unused``, which keep their default (MomentLearner's route reads no hull,
    so it has no ``net_slab``): a parameter renamed or dropped on one side
    raises here instead of leaving its setting silently at the default.
    """
    missing = [name for name in settings_class.__dataclass_fields__
               if name not in unused and name not in estimator.get_params(deep=False)]
    if missing:
        raise TypeError(f"{type(estimator).__name__} has no parameter for the {settings_class.__name__} "
                        f"{missing}: add it, or name it among the settings it leaves unused")
    return settings_class(**{name: getattr(estimator, name) for name in settings_class.__dataclass_fields__
                             if name not in unused})
