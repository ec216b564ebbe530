"""SculptLearner: Chen & Li's learner of a multi-head attention layer ([design: sculpt]).

Chen & Li, *Provably learning a multi-head attention layer*, learn
F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i from uniform Boolean examples: sculpt a convex
body that approximates the affine hull of the unknown Θ_i, read their span
off it, search a net inside the span, solve the projections by least squares
and certify the selection on held-out data.  The six phases are public
functions in :mod:`mhalearn.learners.chen_li`, one module each:

1. :func:`~mhalearn.learners.chen_li.crude_projection_sum` — Ŵ_Σ from the
   input–label correlation;
2. :func:`~mhalearn.learners.chen_li.sculpt_body` — decode every row's
   pattern with Ŵ_Σ, accept the agreement rows (every head has the same
   pattern) and turn each into slabs on the log-ratios;
3. :func:`~mhalearn.learners.chen_li.refine_projection_sum` — the body's
   minimum-norm point Θ̄, LP certification of the rows Θ̄ gives a clear
   margin and the refit of Ŵ_Σ on them (the paper's), then our alternating
   refit;
4. :func:`~mhalearn.learners.chen_li.read_span` — with the rows of K*
   (phase 2 again, under the refined Ŵ_Σ), span{Θ_i} = span{centre of K*}
   + its m − 1 long directions, or a refusal, after which our moment route
   (:mod:`~mhalearn.learners.moment_route`) gives the span — as it does
   when its span, read beside the body's in every fit, contradicts the
   body's (:func:`~mhalearn.learners.chen_li.fit.choose_route`);
5. :func:`~mhalearn.learners.chen_li.search_net` — a net over m-tuples of
   heads in the span, W by least squares;
6. :func:`~mhalearn.learners.chen_li.select_candidate` — the held-out
   choice and its certificate (the paper's output), then our L-BFGS polish.

``fit`` calls :func:`~mhalearn.learners.chen_li.sculpt_fit`, which chains
them.  ``report_`` (:class:`~mhalearn.learners.chen_li.SpanSearchReport`)
holds each phase's result with its time and figures, and says which route
produced the span (``report_.route``: ``"body"`` is the paper's,
``"moment"`` ours) and which refit moved Ŵ_Σ
(``report_.refined_sum.moved_by``).  Errors against a planted teacher are an
observer's business (``fit(X, Y, callback=TeacherObserver(teacher))``).
"""

from __future__ import annotations

import numpy as np

from .._estimator import store_parameters
from .._validation import Options, PathLike, check_output_directory
from ..data.fit_data import FitData
from .chen_li.fit import SpanSearchFit, sculpt_fit
from .chen_li.settings import (
    BODY_CONSTRAINTS,
    BODY_SETTINGS_WITHOUT_PARAMETER,
    SEARCH_SETTING_CONSTRAINTS,
    BodySettings,
    settings_from,
)
from .moment_route import check_moment_memory
from .registry import register_learner
from .report import Notifier
from .span_search import SEARCH, SEARCH_CONSTRAINTS, VALIDATION_FRACTION, SpanSearchLearner

#: Phases 1–4's default settings, whose values are SculptLearner's defaults.
BODY = BodySettings()


@register_learner("sculpt")
class SculptLearner(SpanSearchLearner):
    """Learn a multi-head attention layer by sculpting a convex body (Chen & Li).

    See the module docstring for the six phases; each reports its wall time
    and figures in ``report_``, and ``report_.selection.certificate`` holds
    the held-out bound of phase 6.

    X and Y are NumPy arrays or Dask arrays chunked along n
    (``make_dataset(..., chunks=...)``, ``load_dataset``).  Either way
    ``validation_fraction`` of the sequences are held out at random, each block
    (of 65 536 for NumPy arrays, Dask's chunks otherwise) its share
    (:func:`~mhalearn.data.sources.held_out_counts`: the same fraction
    under any chunking; blocks of fewer than 100 sequences warn, as their
    scheduling costs more than their work); phases 1–4
    pass over the training sequences block by block, wherever the active
    Dask scheduler runs the blocks (on NumPy arrays in place, without a
    copy, keeping only the codes of Boolean tokens — one byte per token and
    six entries, 2 % of X and Y at d = 12 — when they fit the memory budget
    with the data); phases 5–6 use the first 10⁵
    training and 2·10⁴ held-out
    sequences of that split
    (:data:`~mhalearn.data.dask_data.SAMPLE_TRAINING`,
    :data:`~mhalearn.data.dask_data.SAMPLE_VALIDATION`).

    Parameters
    ----------
    heads : int
        Number of heads m.
    quantile : float or None
        While Ŵ_Σ is crude, the share of rows (per block of sequences) with
        the smallest decoding residual accepted as agreement rows.  Default:
        1 at m = 1 (with one head every row is an agreement row), 0.01 at
        m ≥ 2 (agreement rows are 1–4 % of all rows at m = 2, d = 12,
        k = 4, ‖Θ_i‖_F = 2, on development teachers).
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
        ``kstar_w_max`` on development teachers seeded 500–502 (m = 2–4,
        rows decoded with the true W_Σ); [decision: kstar-slab-threshold] says
        where it was tested.
    kstar_w_max : float
        The highest weight threshold K* raises to.
    slab_width : float
        κ: slab half-widths are κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + ``slab_floor``,
        σ the decoding's standard deviations.  Chosen so that the true heads
        satisfy ≥ 99 % of the constraints on development teachers.
    slab_floor : float
        t_min, the smallest half-width.
    max_rows : int
        Agreement rows K keeps (a random share per block), and the rows of
        K* that give half-spaces; K* reads the slabs of every row it found,
        up to 250 000 slabs (``BodySettings.kstar_max_slabs``).
    max_constraints : int
        Constraints passed to the convex solver (a random subset: fewer
        constraints give a superset of K, so certificates stay valid).
    eta : float
        Certification: a certified row has ≥ 1 − η of every head's weight on
        one token; candidates are the rows to which Θ̄ gives that much.
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
        cannot see: the committed m = 4 bodies 0.19–0.25 off had gaps of
        1.36–1.59, every m = 2 and m = 3 body accepted 2.02 or more.
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
        and of the net.
    span_route : {"auto", "body", "moment"}
        ``"auto"`` reads the span from the body, runs our moment route
        beside it and uses the moment route's span when the body refuses or
        the two spans contradict each other, and both when the body is
        uncertain (see ``compare_routes_above``); ``"body"`` runs the moment
        route only when the body refuses, and warns then (the body's span
        is taken unchecked, saving the moment route's time, which does not
        grow with n: 3.5–13 s at d = 10–14 on shared cores); ``"moment"``
        skips the sculpting phases.
    search : {"net", "multistart"}
        Full net of m-tuples, or random tuples plus local descent in the span.
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
        on development fits (m = 1, 2: teachers 500–505, n = 10⁵; m = 3:
        teachers 10 and 12 at n = 10⁷), where it tied 0.15 and beat 0.3 and
        the whole ball; the true heads lay within 0.032–0.036 of the radius
        from the body's hull there.
    score_samples : int
        Sequences used to score candidates.
    keep : int
        Candidates passed on to phase 6, at most 1000 (phase 6 solves least
        squares on every training sequence for each, then polishes it).
    refine : {"lbfgs", "none"}
        ``"none"`` returns the paper's output (W by least squares of the
        held-out best candidate); ``"lbfgs"`` (ours) polishes all parameters.
    refine_iter : int
        L-BFGS iterations per polished candidate.
    delta : float
        Failure probability δ of the certificate.
    validation_fraction : float
        Share of examples held out for the selection and its certificate.
    allow_non_boolean : bool
        The phases assume Boolean tokens; set True to run on other inputs anyway.
    checkpoint : str, path or None
        A directory where phases 1–4 and the moment route keep their
        results as they end; a fit of the same data with the same ``heads``,
        body settings, integer ``random_state`` and code resumes after the
        last phase kept, and computes what an uninterrupted fit computes
        (:mod:`mhalearn.data.checkpoint`; the net's settings may differ).
        The key covers the data's values, whatever their Dask names.  Files
        are JSON plus arrays (no pickle: reading one runs no code), checked
        as they are read; one that fails a check is computed again with a
        ``CheckpointWarning``.
    random_state : None, int or Generator

    Attributes
    ----------
    model_ : MultiHeadAttention
        The learned layer (polished when ``refine="lbfgs"``).
    least_squares_model_ : MultiHeadAttention
        The paper's own output: the held-out best net candidate with W by
        least squares, before any polish.
    n_features_in_ : int
        The token dimension d seen in ``fit``.
    report_ : SpanSearchReport
        The phase results in the order they ran, each with its ``seconds``
        and figures, the ``route`` that gave the span and ``total_seconds``
        (observers excluded); ``report_.table()`` prints it,
        ``report_.as_dict()`` gives plain dicts.

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
    """

    streams_dask = True

    _parameter_constraints = {
        **SEARCH_CONSTRAINTS,
        **{name: allowed for name, allowed in BODY_CONSTRAINTS.items() if name not in BODY_SETTINGS_WITHOUT_PARAMETER},
        "span_route": [Options("auto", "body", "moment")],
        "net_slab": SEARCH_SETTING_CONSTRAINTS["net_slab"],
        "checkpoint": [None, PathLike()],
    }

    # The defaults are the settings' (BODY, SEARCH): scikit-learn reads them off this signature.
    def __init__(self, heads: int, *, quantile: float | None = BODY.quantile,
                 residual_tol: float = BODY.residual_tol, estimate_noise: bool = BODY.estimate_noise,
                 simplex_tol: float = BODY.simplex_tol,
                 w_min: float = BODY.w_min, kstar_slabs: int | None = BODY.kstar_slabs,
                 kstar_w_max: float = BODY.kstar_w_max, slab_width: float = BODY.slab_width,
                 slab_floor: float = BODY.slab_floor, max_rows: int = BODY.max_rows,
                 max_constraints: int = BODY.max_constraints, eta: float = BODY.eta,
                 refit_iterations: int = BODY.refit_iterations, refit_rows: int = BODY.refit_rows,
                 refit_rounds: int = BODY.refit_rounds, pool_fraction: float = BODY.pool_fraction,
                 first_pool_share: float = BODY.first_pool_share,
                 prefix_samples: int | None = BODY.prefix_samples,
                 candidate_radius: float = BODY.candidate_radius,
                 max_candidate_rows: int = BODY.max_candidate_rows,
                 min_equalities: int | None = BODY.min_equalities, min_gap: float = BODY.min_gap,
                 hull_trim: float = BODY.hull_trim, hull_core: float = BODY.hull_core,
                 max_span_error: float = BODY.max_span_error, max_span_bound: float = BODY.max_span_bound,
                 bootstrap_resamples: int = BODY.bootstrap_resamples,
                 bootstrap_level: float = BODY.bootstrap_level,
                 compare_routes_above: float = BODY.compare_routes_above, span_point: str = BODY.span_point,
                 norm_bound: float = BODY.norm_bound, span_route: str = "auto", search: str = SEARCH.search,
                 net_radius: float | None = SEARCH.net_radius,
                 net_resolution: float | None = SEARCH.net_resolution,
                 max_candidates: int = SEARCH.max_candidates, net_slab: float | None = SEARCH.net_slab,
                 score_samples: int = SEARCH.score_samples, keep: int = SEARCH.keep,
                 refine: str = SEARCH.refine, refine_iter: int = SEARCH.refine_iter,
                 delta: float = SEARCH.delta, validation_fraction: float = VALIDATION_FRACTION,
                 allow_non_boolean: bool = False, checkpoint=None, random_state=None):
        store_parameters(self, locals())

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        super()._check_shape(samples, length, dim)
        # Every route may run the moment route ("auto" always does; "body" when the body refuses), so its
        # memory is checked before the phases 1–4 that would otherwise run first, for hours at 10⁸.
        check_moment_memory(length, dim)

    def _check_params(self) -> None:
        super()._check_params()
        self._body_settings()  # the settings' own checks: kstar_w_max against w_min
        if self.checkpoint is not None:
            check_output_directory(self.checkpoint, "checkpoint")

    def _body_settings(self) -> BodySettings:
        """Phases 1–4's settings from the parameters (K*'s row choice and refusal at their defaults)."""
        return settings_from(BodySettings, self, unused=BODY_SETTINGS_WITHOUT_PARAMETER)

    def _span_and_select(self, data: FitData, rng: np.random.Generator, notify: Notifier, *, label_bound: float,
                         token_norm: float) -> SpanSearchFit:
        return sculpt_fit(data.X_train, data.Y_train, data.X_val, data.Y_val, self.heads,
                          body=self._body_settings(), search=self._search_settings(),
                          span_route=self.span_route, rng=rng, label_bound=label_bound, token_norm=token_norm,
                          notify=notify, source=data.source, checkpoint_dir=self.checkpoint)
