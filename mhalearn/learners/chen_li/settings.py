"""The hyper-parameters of Chen & Li's six phases, as two frozen settings objects.

:class:`BodySettings` holds those of phases 1–4 (the body) and
:class:`SearchSettings` those of phases 5–6 (the net and the selection);
each documents its settings.  :class:`~mhalearn.SculptLearner` takes both
as its ``body`` and ``search`` parameters, :class:`~mhalearn.MomentLearner`
the second; scikit-learn's nested names reach each setting
(``set_params(body__hull_trim=4.0)``, ``GridSearchCV`` over
``{"body__quantile": [...]}``), and ``mhalearn learn --set body.quantile=0.02``
on the command line.

The defaults here are the only ones: the phases and their helpers take
every setting from the caller.  They were chosen on development instances seeded 500–505,
d = 12, k = 4, n = 10⁵ (docs/chen_li.md says where they were tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._estimator import Settings
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
    "certify_slack": [Real(0.0, 0.5, low_open=True, high_open=True)],
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

#: What each of :class:`SearchSettings`' values may be (checked likewise; the learners' parameters of the
#: same names share them).
SEARCH_SETTING_CONSTRAINTS = {
    "method": [Options("net", "multistart")],
    "net_radius": [None, Real(0.0, low_open=True)],
    "net_resolution": [None, Real(0.0, low_open=True)],
    "max_candidates": [Integer(1)],
    "net_slab": [None, Real(0.0, low_open=True)],
    "score_samples": [Integer(1)],
    # Phase 6 solves least squares on every training sequence for each kept candidate, then polishes it.
    "kept_candidates": [Integer(1, 1000)],
    "refine": [Options("lbfgs", "none")],
    "refine_iter": [Integer(1)],
    "delta": [Real(0.0, 1.0, low_open=True, high_open=True)],
    "norm_bound": [Real(0.0, low_open=True)],
}


def check_settings(settings, constraints: dict) -> None:
    """Raise ``ValueError`` naming the first setting of ``settings`` that ``constraints`` do not allow."""
    for name in settings.__dataclass_fields__:
        check_allowed(getattr(settings, name), name, constraints[name])


@dataclass(frozen=True, repr=False)
class BodySettings(Settings):
    """Hyper-parameters of phases 1–4, the body (``SculptLearner(body=BodySettings(...))``).

    Frozen: ``settings.replace(quantile=0.02)`` or the learner's
    ``set_params(body__quantile=0.02)`` make a changed copy.  Every value
    is checked when the settings are made.

    Parameters
    ----------
    quantile : float or None
        While Ŵ_Σ is crude, the share of rows (per block of sequences) with
        the smallest decoding residual accepted as agreement rows.  Default:
        1 at m = 1 (with one head every row is an agreement row), 0.01 at
        m ≥ 2 (agreement rows are 1–4 % of all rows at m = 2, d = 12,
        k = 4, ‖Θ_i‖_F = 2, on development instances).
    residual_tol : float
        Absolute tolerance on the relative decoding residual ‖âᵀXŴ_Σ − y‖/‖y‖
        for the agreement rows of K* (phase 4), once Ŵ_Σ is refined.
    estimate_noise : bool
        Widen that tolerance to the label noise estimated from the stream's
        first 25 000 sequences under the refined Ŵ_Σ: the relative residual
        below which 95 % of agreement rows fall at that noise, never below
        ``residual_tol`` (:mod:`mhalearn.learners.chen_li.noise`).  The
        noise is estimated, never given; False keeps ``residual_tol``.
    simplex_tol : float
        Accepted patterns are within this of the simplex.
    w_min : float
        Tokens with decoded weight ≥ w_min give slabs, the others half-spaces.
    kstar_slabs : int or None
        K* raises that weight threshold as long as its rows keep at least
        this many slabs (default 4 × the equalities it needs: 8d²), up to
        ``kstar_w_max``: on a token of small weight the heads' log-ratios
        can differ by nats on a row that passes, a bias of the hull that more
        rows do not remove, so K* turns the tokens of least weight into
        half-spaces once it can spare their slabs.  Chosen with
        ``kstar_w_max`` on development instances seeded 500–502 (m = 2–4,
        rows decoded with the true W_Σ); [decision: kstar-slab-threshold] says
        where it was tested.
    kstar_w_max : float
        The highest weight threshold K* raises to.
    slab_width : float
        κ: slab half-widths are κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + ``slab_floor``,
        σ the decoding's standard deviations.  Chosen so that the true heads
        satisfy ≥ 99 % of the constraints on development instances.
    slab_floor : float
        t_min, the smallest half-width.
    max_rows : int
        Agreement rows K keeps (a random share per block), and the rows of
        K* that give half-spaces; K* reads the slabs of every row it found,
        up to ``kstar_max_slabs``.
    kstar_max_slabs : int
        Slabs K* reads at most: the rows it found, in stream order, until
        their slabs reach this many (fewer when a quarter of the memory
        budget holds fewer, never fewer than K*'s threshold rule wants).
    max_constraints : int
        Constraints passed to the convex solver (a random subset: fewer
        constraints give a superset of K, so certificates stay valid).
    certify_slack : float
        η of the paper's certification: a certified row leaves at most η of
        every head's weight off one token; candidates are the rows to which Θ̄
        gives that much.
    refit_iterations : int
        Iterations of our alternating refit of Ŵ_Σ in all (0: the paper's refit only).
    refit_rows : int
        Rows each iteration of our refit fits Ŵ_Σ on: the best-explained
        rows of the pool, at most ``quantile`` of all rows (a trimmed fit).
    refit_rounds : int
        Pools our refit draws from the stream phases 1–3 read: it draws again
        under the new Ŵ_Σ when Ŵ_Σ has moved by more than 0.5 % since the last draw.
    pool_fraction : float
        Candidates of the alternating refit: the best rows of every block by
        residual, at most this share of them and about
        ``max_rows · pool_fraction / quantile`` rows in all (a longer stream
        gives a more selective pool).
    first_pool_share : float
        The most selective share of every block the first pool — drawn under
        the crude Ŵ_Σ — keeps; on longer streams that share is randomly
        capped instead, since a crude Ŵ_Σ cannot rank rows more finely.  The
        default is the share at which the refit was developed (m = 3,
        n = 10⁷: 2·10⁵ pool rows of 4·10⁷).
    prefix_samples : int or None
        Sequences phases 1–3 read: the first blocks holding at least this
        many (default: the shortest stream whose best ``first_pool_share``
        fills the first pool, 10⁷ sequences at m ≥ 2 and k = 4).  On a longer
        stream one *candidate pass* then keeps every row that any Ŵ_Σ within
        ``candidate_radius`` of phase 3's could accept, and our refit goes on
        and K* is read on those rows in memory: a fit reads the stream about
        once ([decision: candidate-pass]).
    candidate_radius : float
        The candidate pass keeps every row whose relative residual under
        some Ŵ'_Σ with ‖Ŵ'_Σ − Ŵ_Σ‖₂ ≤ ``candidate_radius``·‖Ŵ_Σ‖₂ can be at
        most the larger of ``residual_tol`` and the residual of the refit's
        last kept row (a bound, exact in the residual); a refit that leaves
        that ball reads the stream once more around its new Ŵ_Σ.
    max_candidate_rows : int
        The candidate pass keeps at most this many rows (≈ 560 bytes each at
        d = 12, k = 4), those that need the smallest radius, and reports the
        radius it then covers.
    min_equalities : int or None
        K* must hold at least this many slabs to be read (default 2d², never
        fewer than d²); with fewer the body refuses and the moment route is used.
    min_gap : float
        At m ≥ 2 the m − 1 long directions must be separated from the thin
        ones by this ratio of singular values, or the body refuses.  Rows
        that are not agreement rows cut across aff{Θ_i} and close the gap
        in a way every subsample shares, which the span error's estimate
        cannot see: the committed m = 4 bodies 0.165–0.25 off had gaps of
        1.36–1.86, every m = 2 and m = 3 body accepted 2.02 or more.  1.96
        is the geometric midpoint of the least-cost interval (1.908, 2.013]
        on every committed reading (runs/body-m4-testbed/README.md).
    hull_trim : float
        The affine hull is read again without the rows whose slabs disagree
        with it by more than this multiple of the median row's (a trimmed,
        robust hull).
    hull_core : float
        Share of K*'s rows with slabs that first read the hull on their own:
        the share most consistent with the hull they read (least trimmed
        squares), so that up to 1 − ``hull_core`` of rows that are not
        agreement rows cannot steer it; ``hull_trim`` then takes back every
        row the core's hull explains as well as its own (1: no core, every
        row starts).
    max_span_error : float
        The body refuses when the estimate of its span's error (sin of the
        largest principal angle), the median of the rescaled span distances
        of subsamples of the kept rows (``report_.span.median_error``),
        exceeds this ([decision: span-refusal]).
    max_span_bound : float
        The body also refuses when the ``bootstrap_level`` quantile of the
        same distances, an upper bound of the error
        (``report_.span.estimated_error``), exceeds this: a guard against a
        span whose subsamples spread far (1: off).  ``report_.span.refused_by``
        names the rule that refused.
    bootstrap_resamples, bootstrap_level : int, float
        Subsamples of the kept rows of K* (each of about (N + d²)/2 of
        their N equations), and the quantile of their rescaled span
        distances taken as the upper bound of the span's error (the route
        rule reads it).
    compare_routes_above : float
        With ``span_route="auto"`` the moment route runs beside the body in
        every fit, and its span is used alone if the two spans lie farther
        apart than the body's estimated span error plus twice the moment
        route's (the estimates contradict each other; the body's bootstrap
        is the one blind to a bias its resamples share).  Otherwise, when
        the body's estimate exceeds this, the net is searched in both spans
        and phase 6 chooses among both nets' candidates by their held-out
        error, and so chooses the route; at or below it the body's span is
        used alone.  1 never searches both.  0.07 is just below the lowest
        estimate the moment route gave on development fits (m = 2, seeds
        10–13, three shapes: 0.073–0.113): below it the body's estimate was
        the lower in every one of them, so searching both only costs time.
    span_point : {"centre", "min_norm"}
        The point of K* whose direction completes the span: the centre of
        the slab system (default), or K*'s minimum-norm point (the paper's
        Θ̄*, which the slabs' half-widths pull towards the origin).
    norm_bound : float
        An upper bound on every ‖Θ_i‖_F: the radius of the body's norm ball
        and of the net.  A learner sets it for both settings from its own
        ``norm_bound``.
    """

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
    certify_slack: float = 0.05
    refit_iterations: int = 100
    refit_rows: int = 4000
    refit_rounds: int = 4
    pool_fraction: float = 0.1
    first_pool_share: float = 0.005
    prefix_samples: int | None = None
    candidate_radius: float = 0.02
    max_candidate_rows: int = 2_000_000
    min_equalities: int | None = None
    min_gap: float = 1.96
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


@dataclass(frozen=True, repr=False)
class SearchSettings(Settings):
    """Hyper-parameters of phases 5–6, the net and the selection (``SculptLearner(search=SearchSettings(...))``).

    Frozen like :class:`BodySettings` (``set_params(search__keep=8)``).

    Parameters
    ----------
    method : {"net", "multistart"}
        Phase 5 scores the full net of m-tuples, or random tuples plus local
        descent in the span.
    net_radius, net_resolution : float or None
        Net over coefficient vectors in a ball of this radius (default:
        1.5·√m times the span point's norm, the norm of m orthogonal heads of
        equal norm whose centroid it is, capped by ``norm_bound``) at this
        spacing (default: the finest within ``max_candidates``).
    max_candidates : int
        Budget of candidate tuples scored.
    net_slab : float or None
        On the body's route, the net keeps only its points within this share
        of its radius of the affine hull the body read (every Θ_i lies on
        aff{Θ_i}, and K* is thin across it), so the budget buys a finer
        spacing where the heads are; None: the whole ball, as on the moment
        route, which reads no hull.  0.05 (below the net's spacing at every
        budget below 1.3·10¹⁰ tuples at m = 3: one layer, on the hull) was chosen
        on development fits (m = 1, 2: seeds 500–505, n = 10⁵; m = 3:
        seeds 10 and 12 at n = 10⁷), where it tied 0.15 and beat 0.3 and
        the whole ball; the true heads lay within 0.032–0.036 of the radius
        from the body's hull there.
    score_samples : int
        Sequences used to score candidates.
    kept_candidates : int
        Candidates passed on to phase 6, at most 1000 (phase 6 solves least
        squares on every training sequence for each, then polishes it).
    refine : {"lbfgs", "none"}
        ``"none"`` returns the paper's output (W by least squares of the
        held-out best candidate); ``"lbfgs"`` (ours) polishes all parameters.
    refine_iter : int
        L-BFGS iterations per polished candidate.
    delta : float
        Failure probability δ of the certificate.
    norm_bound : float
        An upper bound on every ‖Θ_i‖_F: the radius of the body's norm ball
        and of the net.  A learner sets it for both settings from its own
        ``norm_bound``.
    """

    method: str = "net"
    net_radius: float | None = None
    net_resolution: float | None = None
    max_candidates: int = 200_000
    net_slab: float | None = 0.05
    score_samples: int = 256
    kept_candidates: int = 4
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
