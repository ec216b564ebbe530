"""
Chen & Li's phases one by one
=============================

Run the six phases of Chen & Li's learner as the public functions of
:mod:`mhalearn.learners.chen_li`, in the paper's order, on a planted
two-head teacher (d = 12, k = 4): each returns a frozen result with its own
``seconds`` and figures, so one phase can be studied, timed or swapped
without the others.  The teacher only measures the results here; it is never
passed to a phase.  Phases 1–5 see the first 80 000 sequences only; phase 6
scores and certifies the candidates on the 20 000 they never saw.

    python examples/chen_li_phases.py
"""

import numpy as np

import mhalearn
from mhalearn.data.sources import ArraySource
from mhalearn.evaluation import span_distance, w_sum_error
from mhalearn.learners.chen_li import (
                                       BodySettings,
                                       SearchSettings,
                                       certificate_bounds,
                                       crude_projection_sum,
                                       read_span,
                                       refine_projection_sum,
                                       sculpt_body,
                                       search_net,
                                       select_candidate,
)

teacher = mhalearn.sample_teacher(heads=2, dim=12, rng=0)
X, Y = mhalearn.make_dataset(teacher, samples=100_000, length=4, rng=1)
X_train, Y_train, X_held, Y_held = X[:80_000], Y[:80_000], X[80_000:], Y[80_000:]  # held out from phases 1–5
source, body, rng = ArraySource(X_train, Y_train), BodySettings(), np.random.default_rng(0)

crude = crude_projection_sum(source)                                                  # phase 1
first = sculpt_body(source, crude.w_sum, 2, body, rng, rule="quantile")              # phase 2
refined = refine_projection_sum(source, 2, first, crude.w_sum, body, rng)            # phase 3
final = sculpt_body(source, refined.w_sum, 2, body, rng, rule="absolute")            # phase 2 again: K*
span = read_span(final.slabs, 2, body, rng)                                          # phase 4
print(f"Ŵ_Σ off by {w_sum_error(crude.w_sum, teacher):.3f} → {w_sum_error(refined.w_sum, teacher):.4f} "
      f"({refined.moved_by}); span distance {span_distance(span.basis, teacher):.3f}")

search = SearchSettings(refine="none")
net = search_net(X_train, Y_train, span.basis, 2, search.radius(span.head_norm, 2), search, rng)  # phase 5
chosen = select_candidate(X_train, Y_train, X_held, Y_held, list(net.kept), search,
                          **certificate_bounds(X_train, Y_train))                          # phase 6
print(f"{net.candidates} candidates in {net.seconds:.1f} s; held-out error of the paper's output "
      f"{chosen.val_least_squares:.2e}")
