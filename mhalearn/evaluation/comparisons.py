"""Comparison runs beside a fit: what another route would have given on the same data.

A comparison is an explicit evaluation step with its own random generator
and its own timing; it never runs inside a learner's fit and never changes
it.  :func:`compare_moment_route` runs our moment route on the data a
:class:`~mhalearn.SculptLearner` was given, for its span distance and time
beside the body's.  (K*'s minimum-norm point, the other comparison, needs
the body's slabs and is :class:`~mhalearn.evaluation.TeacherObserver`'s
``compare_min_norm``.)
"""

from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from ..attention.model import MultiHeadAttention
from ..data.fit_data import root_mean_square
from ..learners.moment_route import moment_span
from .observer import span_distance


def compare_moment_route(X: np.ndarray, Y: np.ndarray, heads: int, teacher: MultiHeadAttention,
                         rng: np.random.Generator) -> dict:
    """Our moment route on (X, Y) in the learners' units: its span distance to the teacher and its time.

    The data are standardised as the learners standardise them (X and Y
    divided by their root mean square); the span distance does not depend on
    the units.  Returns ``{"moment_distance", "moment_seconds"}``.
    """
    X_std, Y_std = X / root_mean_square(X), Y / root_mean_square(Y)
    start = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):  # as inside the learners' fits
        moment = moment_span(X_std, Y_std, heads, rng=rng)
    return {"moment_seconds": time.perf_counter() - start, "moment_distance": span_distance(moment.basis, teacher)}


__all__ = ["compare_moment_route"]
