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
from .._validation import Instance, Options, PathLike, check_output_directory
from ..data.fit_data import FitData
from .chen_li.fit import SpanSearchFit, sculpt_fit
from .chen_li.settings import NORM_BOUND, BodySettings, SearchSettings
from .moment_route import check_moment_memory
from .registry import register_learner
from .report import Notifier
from .span_search import SEARCH, SEARCH_CONSTRAINTS, VALIDATION_FRACTION, SpanSearchLearner, check_norm_bound

#: Phases 1–4's default settings, SculptLearner's default ``body``.
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
    body : BodySettings
        The settings of phases 1–4 (the agreement rows, the slabs, the
        refits of Ŵ_Σ, K* and the span it reads, the span's refusal and the
        route rule), each documented on
        :class:`~mhalearn.learners.chen_li.BodySettings`; change one with
        ``BodySettings(quantile=0.02)`` or ``set_params(body__quantile=0.02)``.
    search : SearchSettings
        The settings of phases 5–6 (the net, the candidates kept, the polish
        and the certificate's δ), each documented on
        :class:`~mhalearn.learners.chen_li.SearchSettings`:
        ``search__refine="none"`` returns the paper's output unpolished.
    span_route : {"auto", "body", "moment"}
        ``"auto"`` reads the span from the body, runs our moment route
        beside it and uses the moment route's span when the body refuses or
        the two spans contradict each other, and both when the body is
        uncertain (``body.compare_routes_above``); ``"body"`` runs the
        moment route only when the body refuses, and warns then (the body's
        span is taken unchecked, saving the moment route's time, which does
        not grow with n: 3.5–13 s at d = 10–14 on shared cores);
        ``"moment"`` skips the sculpting phases.
    norm_bound : float
        An upper bound on every ‖Θ_i‖_F: the radius of the body's norm ball
        and of the net (it sets both settings' ``norm_bound``).
    validation_fraction : float
        Share of examples held out for the selection and its certificate.
    allow_non_boolean : bool
        The phases assume Boolean tokens; set True to run on other inputs anyway.
    checkpoint : str, path or None
        A directory where phases 1–4 and the moment route keep their
        results as they end; a fit of the same data with the same ``heads``,
        body settings, integer ``random_state`` and code resumes after the
        last phase kept, and computes what an uninterrupted fit computes
        (:mod:`mhalearn.data.checkpoint`; the search settings may differ).
        Files are JSON plus arrays (no pickle), checked as they are read;
        one that fails a check is computed again with a ``CheckpointWarning``.
    random_state : None, int or Generator

    Attributes
    ----------
    model_ : MultiHeadAttention
        The learned layer (polished when ``search.refine="lbfgs"``).
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
        "body": [Instance(BodySettings)],
        "span_route": [Options("auto", "body", "moment")],
        "checkpoint": [None, PathLike()],
    }

    def __init__(self, heads: int, *, body: BodySettings = BODY, search: SearchSettings = SEARCH,
                 span_route: str = "auto", norm_bound: float = NORM_BOUND,
                 validation_fraction: float = VALIDATION_FRACTION, allow_non_boolean: bool = False,
                 checkpoint=None, random_state=None):
        store_parameters(self, locals())

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        super()._check_shape(samples, length, dim)
        # Every route may run the moment route ("auto" always does; "body" when the body refuses), so its
        # memory is checked before the phases 1–4 that would otherwise run first, for hours at 10⁸.
        check_moment_memory(length, dim)

    def _check_params(self) -> None:
        super()._check_params()
        check_norm_bound(self, "body")
        if self.checkpoint is not None:
            check_output_directory(self.checkpoint, "checkpoint")

    def _data_options(self, samples: int) -> dict:
        # Phases 1–3 read their prefix about six times and the candidate pass the rest once more: a generated
        # stream (make_dataset's arrays are read as theirs) keeps the labels of as many blocks as its share of the
        # memory budget holds from the units' pass on; a checkpoint's key hashes the blocks in that pass.
        return {"kept_samples": None if self.span_route == "moment" else samples,
                "digest": self.checkpoint is not None}

    def _span_and_select(self, data: FitData, rng: np.random.Generator, notify: Notifier, *, label_bound: float,
                         token_norm: float) -> SpanSearchFit:
        return sculpt_fit(data.X_train, data.Y_train, data.X_val, data.Y_val, self.heads,
                          body=self.body.replace(norm_bound=self.norm_bound), search=self._search_settings(),
                          span_route=self.span_route, rng=rng, label_bound=label_bound, token_norm=token_norm,
                          notify=notify, source=data.source, checkpoint_dir=self.checkpoint)
