"""Chen & Li's six phases chained: :func:`sculpt_fit`, and the report it returns.

:func:`sculpt_span` runs phases 1–4 (examples in, span{Θ_i} or a refusal
out) on a stream of examples, so an experiment can run them on 10⁶
sequences in bounded memory; :func:`search_and_select` runs phases 5–6 on a
span; :func:`sculpt_fit` chains both, using our moment route
(:mod:`mhalearn.learners.moment_route`), always run beside the body, when
the body refuses or the moment route's span contradicts the body's, and
both routes' candidates when the body is uncertain (:func:`choose_route`).
:class:`~mhalearn.SculptLearner` calls :func:`sculpt_fit` and
:class:`~mhalearn.MomentLearner` the moment route and
:func:`search_and_select`.

Each chain tells its observers ``notify(phase, result)`` after every phase
(:class:`~mhalearn.learners.report.Notifier`); the phase functions
themselves never see an observer.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from ...data.checkpoint import NoCheckpoint, open_checkpoint
from ...data.sources import ArraySource
from ..moment_route import MomentSpan, moment_span, sine_distance
from ..report import LearnerReport, Notifier, Phase, PhaseFile, Route, Rule, certificate_line
from .phase1_crude_sum import CrudeSum, crude_projection_sum
from .phase2_sculpt import sculpt_body
from .phase3_refine_sum import RefinedSum, refine_projection_sum, refit_on_stream
from .phase4_span import SpanReading, read_span
from .phase5_net import NetSearch, search_net
from .phase6_select import Selection, select_candidate
from .settings import BodySettings, SearchSettings


@dataclass(frozen=True, kw_only=True)
class SpanSearchFit:
    """What a span search returns (:func:`sculpt_fit`, ``MomentLearner``): its phase results and route.

    The fields of :class:`SpanSearchReport` but for the time and the units,
    which :meth:`~mhalearn.learners.base.AttentionLearner.fit` adds.
    """

    route: Route
    fallback: str | None = None
    route_reason: str | None = None
    resumed: tuple = ()
    kept_seconds: float = 0.0
    crude_sum: CrudeSum | None = None
    sculpt: tuple = ()
    refined_sum: RefinedSum | None = None
    span: SpanReading | None = None
    moment: MomentSpan | None = None
    net: NetSearch | None = None
    compared_net: NetSearch | None = None
    selection: Selection | None = None

    def report_fields(self) -> dict:
        """The fields by name, unconverted (the phase results stay frozen dataclasses)."""
        return {item.name: getattr(self, item.name) for item in dataclasses.fields(self)}


@dataclass(frozen=True, kw_only=True)
class SpanSearchReport(LearnerReport, SpanSearchFit):
    """``report_`` of :class:`~mhalearn.SculptLearner` and :class:`~mhalearn.MomentLearner`.

    The phase results in the order they ran — ``crude_sum`` (1), ``sculpt``
    (2: the round under the crude Ŵ_Σ, then the rows of K* under the refined
    one), ``refined_sum`` (3), ``span`` (4, read from the body), ``moment``
    (our moment route, when it gave the span), ``net`` (5), ``selection``
    (6) — with ``route``, the route whose span phases 5–6 used
    (:class:`~mhalearn.learners.report.Route`; ``"body"``: the paper's;
    ``"moment"``: ours), ``fallback``, why the body's span was
    not used, and ``route_reason``, why ``route`` was chosen, and
    ``compared_net``, the other route's net when phase 6 chose between both
    routes' candidates (``route`` is then the route of the chosen one), and
    ``resumed``, the phases loaded from a checkpoint
    (``SculptLearner(checkpoint=...)``; their ``seconds`` are those of the
    run that computed them), and ``kept_seconds``, the sum of those seconds:
    the fit's whole time is ``total_seconds`` (this run's) + ``kept_seconds``.  ``moment`` is also set
    when the moment route ran only to check the body's span.  A phase that did not run is None (the moment
    learner runs only ``moment``, ``net`` and ``selection``).
    """

    def phases(self):
        return [(Phase.CRUDE_SUM, self.crude_sum), *((Phase.SCULPT, body) for body in self.sculpt or [None]),
                (Phase.REFINED_SUM, self.refined_sum), (Phase.SPAN, self.span), (Phase.MOMENT, self.moment),
                (Phase.NET, self.net),
                *([(Phase.COMPARED_NET, self.compared_net)] if self.compared_net is not None else []),
                (Phase.SELECTION, self.selection)]

    def body_phases(self) -> BodyPhases | None:
        """Phases 1–4 as :func:`sculpt_span` returned them (None when they did not run)."""
        return None if self.span is None else BodyPhases(self.crude_sum, self.sculpt, self.refined_sum, self.span)

    def footer(self) -> list[str]:
        reason = self.fallback or self.route_reason
        lines = [f"span from the {self.route} route" + ("" if reason is None else f": {reason}")]
        if self.resumed:
            lines.append(f"loaded from the checkpoint (their seconds are the run's that computed them): "
                         f"{', '.join(self.resumed)}; with their {self.kept_seconds:.2f} s the fit took "
                         f"{self.total_seconds + self.kept_seconds:.2f} s")
        if self.selection is not None:
            lines.append(certificate_line(self.selection.certificate))
        return lines


@dataclass(frozen=True)
class BodyPhases:
    """What :func:`sculpt_span` ran: phases 1–4's results (None where a phase did not run)."""

    crude_sum: CrudeSum | None
    sculpt: tuple
    refined_sum: RefinedSum | None
    span: SpanReading

    @property
    def seconds(self) -> float:
        """The time of phases 1–4: the sum of their results' own times."""
        return sum(result.seconds for result in (self.crude_sum, *self.sculpt, self.refined_sum, self.span)
                   if result is not None)


def sculpt_span(source, heads: int, settings: BodySettings, rng: np.random.Generator,
                notify=Notifier(None), checkpoint=NoCheckpoint()) -> BodyPhases:
    """Phases 1–4 of Chen & Li's learner: from examples to span{Θ_i}, or a refusal.

    Parameters
    ----------
    source : a stream of examples (:mod:`mhalearn.data.sources`).
    heads : m.
    settings : the phases' hyper-parameters.
    rng : random generator (subsamples of rows and constraints).
    notify : told ``(phase, result)`` after each phase.
    checkpoint : keeps each phase's result as it ends, or gives the one a
        previous run kept (:class:`~mhalearn.data.checkpoint.PhaseCheckpoint`).

    Returns
    -------
    BodyPhases; ``span.refused`` says why there is no span (``span.basis``
    is the orthonormal basis (m, d²) otherwise).
    """
    if source.dim <= source.length:
        # The k points x_j Ŵ_Σ span an affine set of dimension k − 1 ≥ d − 1, so
        # every row is fitted with (almost) zero residual: agreement rows
        # cannot be told apart ([decision: agreement-rows]).
        span = SpanReading(seconds=0.0, refused_by="shape",
                           refused=f"d = {source.dim} <= k = {source.length}: the decoding "
                                   f"residual cannot detect agreement rows (needs d > k)")
        notify(Phase.SPAN, span)
        return BodyPhases(None, (), None, span)
    # Phases 1–3 read a prefix; on a longer stream one candidate pass then carries our refit and K* over
    # all of it, so the fit reads the stream about once ([decision: candidate-pass]).
    # The prefix's reads (about six at the default settings) label it once: a generated stream keeps its
    # labels, within the memory budget ([decision: candidate-pass]).
    prefix_samples = settings.prefix_for(heads, source.length) or source.samples
    stream = source.keeping_labels(prefix_samples)
    prefix = stream.prefix(prefix_samples)
    crude = checkpoint.run(PhaseFile.CRUDE_SUM, rng, lambda: crude_projection_sum(prefix))
    notify(Phase.CRUDE_SUM, crude)
    first = checkpoint.run(PhaseFile.SCULPT, rng,
                           lambda: sculpt_body(prefix, crude.w_sum, heads, settings, rng, rule=Rule.QUANTILE))
    notify(Phase.SCULPT, first)
    refined = checkpoint.run(PhaseFile.REFINED_SUM, rng, lambda: dataclasses.replace(
        refine_projection_sum(prefix, heads, first, crude.w_sum, settings, rng), prefix_labels=stream.kept_labels))
    if prefix is not stream:
        prefix_refined = refined
        refined = checkpoint.run(PhaseFile.STREAM_REFIT, rng,
                                 lambda: refit_on_stream(stream, heads, prefix_refined, settings,
                                                         checkpoint.progress(PhaseFile.STREAM_REFIT), notify))
    notify(Phase.REFINED_SUM, refined)
    final = checkpoint.run(PhaseFile.KSTAR, rng,
                           lambda: sculpt_body(stream, refined.w_sum, heads, settings, rng, rule=Rule.ABSOLUTE,
                                               candidates=refined.candidates))
    notify(Phase.SCULPT, final)
    span = checkpoint.run(PhaseFile.SPAN, rng, lambda: read_span(final.slabs, heads, settings, rng))
    notify(Phase.SPAN, span)
    return BodyPhases(crude, (first, final), refined, span)


def search_and_select(X, Y, X_val, Y_val, basis: np.ndarray, radius: float, heads: int, settings: SearchSettings,
                      rng: np.random.Generator, *, label_bound: float, token_norm: float,
                      notify=Notifier(None), hull: tuple | None = None) -> tuple[NetSearch, Selection]:
    """Phases 5–6 on one span: the net, W by least squares, the certified choice, the polish.

    ``hull`` is the body's affine hull (``SpanReading.hull``) when the span
    is the body's: the net then lies near it (:func:`search_net`).
    """
    net = search_net(X, Y, basis, heads, radius, settings, rng, hull=hull)
    notify(Phase.NET, net)
    selection = select_candidate(X, Y, X_val, Y_val, list(net.kept), settings, label_bound=label_bound,
                                 token_norm=token_norm)
    notify(Phase.SELECTION, selection)
    return net, selection


def choose_route(span: SpanReading, moment: MomentSpan | None, settings: BodySettings) -> tuple[Route, str]:
    """Which span phases 5–6 use, and why: ``(Route.BODY | Route.MOMENT | Route.BOTH, reason)``.

    The moment route's span is used if the body refused, or if the two
    spans lie farther apart than the body's estimated error plus twice the
    moment route's — which two spans within those distances of the truth
    cannot, the distance being a metric — since the body's estimate is
    blind to a bias its subsamples share.  Otherwise the spans agree, and
    the body's is used alone if its estimate is at most
    ``settings.compare_routes_above``; above it, ``"both"``: phase 6 picks
    between the two routes' net candidates on held-out data
    (:func:`sculpt_fit`).  ``moment`` None (``span_route="body"``) takes
    the body's span unchecked.  The estimates come from the data alone:
    the body's is the 90th percentile of its rescaled subsample distances
    (:func:`~mhalearn.learners.chen_li.phase4_span.bootstrap_span_error`),
    the moment route's a parametric bootstrap through the softmax
    (:func:`~mhalearn.learners.moment_route.moment_span`); the check rests
    on the moment route's estimate being right, a bias of another kind
    (its linearisation's) than the body's ([decision: route-rule]).
    """
    if span.refused is not None:
        return Route.MOMENT, f"the body refused ({span.refused}); used the moment route"
    if moment is None:
        return Route.BODY, "the moment route was not run: the body's span, unchecked"
    # sin of the largest principal angle is a metric on m-dimensional spans (‖P − P'‖₂), so two spans
    # within e and e' of the truth lie within e + e' of each other.  The moment route's estimate reads
    # up to 1.2× low on the development fits (m = 2), hence room of 2e'; farther apart than that, the
    # body's estimate is the one to distrust, blind as it is to a bias its resamples share
    # ([decision: route-rule]).
    apart = sine_distance(span.basis, moment.basis)
    allowed = span.estimated_error + 2.0 * moment.estimated_error
    if apart > allowed:
        return Route.MOMENT, (f"the two routes' spans are {apart:.3f} apart, more than the body's estimated error "
                          f"{span.estimated_error:.3f} plus twice the moment route's {moment.estimated_error:.3f} "
                          f"allow ({allowed:.3f}): the body's estimate is not trusted; used the moment route")
    agree = (f"the two routes' spans are {apart:.3f} apart, within the body's estimated error "
             f"{span.estimated_error:.3f} plus twice the moment route's {moment.estimated_error:.3f} "
             f"({allowed:.3f})")
    if span.estimated_error <= settings.compare_routes_above:
        return Route.BODY, f"{agree}, and the body's estimate <= {settings.compare_routes_above}: the body's span"
    return Route.BOTH, (f"{agree}, and the body's estimate > {settings.compare_routes_above}: phase 6 chose "
                        f"between both routes' candidates on held-out data")


def route_net(route: Route, span: SpanReading | None, moment: MomentSpan | None, heads: int,
              search: SearchSettings) -> tuple[np.ndarray, float, tuple | None]:
    """What phase 5 searches on ``route``: the span's basis, the net's radius and the hull (None: the ball).

    SculptLearner's radius rule is the body's (√m times the norm the span was
    read from) on either route; MomentLearner scales one head's norm
    ([decision: net-around-hull]).  Only the body reads a hull.
    """
    if route == Route.BODY:
        return span.basis, search.radius(span.head_norm, heads), span.hull
    return moment.basis, search.radius(moment.head_norm, heads), None


def select_between_routes(X, Y, X_val, Y_val, span: SpanReading, moment: MomentSpan, heads: int,
                          search: SearchSettings, rng: np.random.Generator, *, label_bound: float,
                          token_norm: float) -> tuple[Route, NetSearch, NetSearch, Selection]:
    """Phases 5–6 on both routes' spans: each route's net, then phase 6 over all their candidates.

    The held-out error of W by least squares — phase 6's own criterion,
    the paper's — picks the candidate, and so the route, and the
    certificate counts every candidate of both nets.  Returns the chosen
    route, its net, the other route's net and the selection.
    """
    nets = {}
    for route in (Route.BODY, Route.MOMENT):
        basis, radius, hull = route_net(route, span, moment, heads, search)
        nets[route] = search_net(X, Y, basis, heads, radius, search, rng, hull=hull)
    selection = select_candidate(X, Y, X_val, Y_val, [*nets[Route.BODY].kept, *nets[Route.MOMENT].kept], search,
                                 label_bound=label_bound, token_norm=token_norm)
    chosen = selection.least_squares_model.thetas
    route = Route.BODY if any(np.array_equal(chosen, thetas) for thetas in nets[Route.BODY].kept) else Route.MOMENT
    return route, nets[route], nets[Route.MOMENT if route == Route.BODY else Route.BODY], selection


def sculpt_fit(X, Y, X_val, Y_val, heads: int, *, body: BodySettings = BodySettings(),
               search: SearchSettings = SearchSettings(), span_route: Route = Route.AUTO, rng: np.random.Generator,
               label_bound: float, token_norm: float, notify=Notifier(None), source=None,
               checkpoint_dir=None) -> SpanSearchFit:
    """Chen & Li's learner on standardised arrays: phases 1–6, our moment route when it is the better bet.

    ``span_route="auto"`` reads the span from the body and always runs the
    moment route beside it: the moment route's span is used if the body
    refuses or the two spans contradict each other; otherwise the body's
    alone if its estimated span error is at most
    ``body.compare_routes_above``, and above it phase 6 chooses among both
    routes' net candidates by their held-out error (:func:`choose_route`,
    :func:`select_between_routes`).  ``"body"`` runs the moment route only
    when the body refuses, and warns then, so the body's span is taken
    unchecked; ``"moment"`` skips phases 1–4.  ``source`` is the stream phases 1–4 read
    (:mod:`mhalearn.data.sources`; default ``ArraySource(X, Y)``), e.g. a
    :class:`~mhalearn.data.dask_data.DaskSource` of a dataset larger than
    memory, of which X, Y are then an in-memory sample for phases 5–6 and
    the moment route.  With ``checkpoint_dir`` phases 1–4 and the moment
    route keep their results there as they end, and a rerun resumes after
    the last one kept (:mod:`mhalearn.data.checkpoint`).  Returns a
    :class:`SpanSearchFit`: the phase results, ``compared_net`` when both routes'
    candidates were compared, ``route``, ``fallback``, ``route_reason``,
    ``resumed``, the phases loaded from the checkpoint, and ``kept_seconds``,
    the seconds they took when computed.
    """
    fields = {}
    span = moment = None
    # The moment route reads X, Y (hashed apart when they are not the source's own arrays), and
    # span_route decides which phases run before it, so both name the checkpoint too.
    sample = () if source is None else (X, Y)
    source = ArraySource(X, Y) if source is None else source
    checkpoint = open_checkpoint(checkpoint_dir, source, heads, body, rng, span_route, *sample)
    if span_route != Route.MOMENT:
        phases = sculpt_span(source, heads, body, rng, notify, checkpoint)
        span = phases.span
        fields.update(crude_sum=phases.crude_sum, sculpt=phases.sculpt, refined_sum=phases.refined_sum, span=span)
    # "auto" always runs the moment route beside the body: its cost does not grow with n (at most
    # max_rows output rows) and its memory is checked before phase 1, and only its span can contradict
    # a bias every bootstrap resample of the body shares (choose_route).
    if span_route != Route.BODY or span.refused is not None:
        moment = checkpoint.run(PhaseFile.MOMENT, rng, lambda: moment_span(X, Y, heads, rng=rng))
        notify(Phase.MOMENT, moment)
        fields["moment"] = moment
    if span is None:
        route, reason = Route.MOMENT, "span_route='moment'"
    else:
        route, reason = choose_route(span, moment, body)
    fields["resumed"], fields["kept_seconds"] = tuple(checkpoint.resumed), checkpoint.kept_seconds
    if route == Route.BOTH:
        route, fields["net"], fields["compared_net"], fields["selection"] = select_between_routes(
            X, Y, X_val, Y_val, span, moment, heads, search, rng, label_bound=label_bound,
            token_norm=token_norm)
        reason = (f"{reason}: the {route} route's held-out error {fields['selection'].val_least_squares:.3g} "
                  f"was the lower")
        notify(Phase.NET, fields["net"])
        notify(Phase.SELECTION, fields["selection"])
    else:
        if route == Route.MOMENT and span is not None and span_route == Route.BODY:
            # Past this function, SculptLearner._span_and_select, SpanSearchLearner._fit and fit: the user's call.
            warnings.warn(f"SculptLearner(span_route='body'): {reason}", RuntimeWarning, stacklevel=5)
        basis, radius, hull = route_net(route, span, moment, heads, search)
        fields["net"], fields["selection"] = search_and_select(
            X, Y, X_val, Y_val, basis, radius, heads, search, rng, label_bound=label_bound, token_norm=token_norm,
            notify=notify, hull=hull)
    fields.update(route=route, route_reason=reason)
    if route == Route.MOMENT and span is not None:
        fields["fallback"] = reason  # why the body's span was not used
    return SpanSearchFit(**fields)
