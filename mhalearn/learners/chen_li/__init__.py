"""Chen & Li's learner, one module per phase in the order a fit runs them.

Chen, S. & Li, Y., *Provably learning a multi-head attention layer*: from
uniform Boolean examples of F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i,

1. :func:`crude_projection_sum` (``phase1_crude_sum``) — a crude Ŵ_Σ = Σ_i Ŵ_i;
2. :func:`sculpt_body` (``phase2_sculpt``) — the agreement rows (every head
   has the same pattern) decoded with Ŵ_Σ, and their slabs: a convex body
   long along aff{Θ_i} and thin across it;
3. :func:`refine_projection_sum` (``phase3_refine_sum``) — Ŵ_Σ refined: the
   paper's LP-certified refit, then our alternating refit (phases 1–3 read a
   prefix of a long stream; :func:`refit_on_stream` carries our refit over
   the rest in one candidate pass, whose rows phase 4 reads);
4. :func:`read_span` (``phase4_span``) — span{Θ_i} from the re-sculpted body
   K* (phase 2 under the refined Ŵ_Σ), or a refusal;
5. :func:`search_net` (``phase5_net``) — a net of m-tuples of heads in the
   span, scored by least squares in W (the cost exponential in m);
6. :func:`select_candidate` (``phase6_select``) — the held-out choice and its
   certificate (the paper's output), then our L-BFGS polish.

Each phase function takes plain inputs and returns a frozen result with its
``seconds`` and the figures it computed from the data alone.
:func:`sculpt_fit` (``fit``) chains them, with our moment route when the body
refuses, and phase 6 choosing between both routes' candidates when the body
is uncertain; :func:`sculpt_span` and :func:`search_and_select` are its two
halves.  :mod:`~mhalearn.learners.chen_li.body` is the convex body phases 3
and 4 solve over; the settings of the phases are in
:mod:`~mhalearn.learners.chen_li.settings`.
"""

from .alternating_refit import AlternatingRefit, StreamRefit
from .fit import BodyPhases, SpanSearchFit, SpanSearchReport, route_net, sculpt_fit, sculpt_span, search_and_select
from .phase1_crude_sum import CrudeSum, crude_projection_sum
from .phase2_sculpt import SculptedBody, sculpt_body
from .phase3_refine_sum import CertifiedRefit, RefinedSum, refine_projection_sum, refit_on_stream
from .phase4_span import SpanReading, read_span
from .phase5_net import NetSearch, search_net
from .phase6_select import Selection, certificate_bounds, select_candidate
from .settings import BodySettings, SearchSettings

__all__ = [
    "crude_projection_sum", "sculpt_body", "refine_projection_sum", "read_span", "search_net", "select_candidate",
    "refit_on_stream", "sculpt_fit", "sculpt_span", "search_and_select", "route_net", "certificate_bounds",
    "CrudeSum", "SculptedBody", "RefinedSum", "CertifiedRefit", "AlternatingRefit", "StreamRefit", "SpanReading",
    "NetSearch",
    "Selection", "SpanSearchFit", "SpanSearchReport", "BodyPhases", "BodySettings", "SearchSettings",
]
