"""Evaluation: watching learners from outside ([design: experiments]).

- :class:`TeacherObserver` — the teacher's view of a fit, passed as its
  ``callback``: each phase result measured against the planted layer
  (:mod:`~mhalearn.evaluation.observer`);
- :func:`compare_moment_route` — a comparison run beside a fit, with its own
  generator and time (:mod:`~mhalearn.evaluation.comparisons`);
- :func:`plant_instance`, :func:`fit_timed`, :func:`measure`,
  :func:`learn_planted` — plant → fit → measure
  (:mod:`~mhalearn.evaluation.planted`);
- :func:`~mhalearn.seeding.seeded_rng`, re-exported: generators named by
  their keys.

Nothing here changes what a learner computes.
"""

from ..seeding import seeded_rng
from .comparisons import compare_moment_route
from .observer import (
    TeacherObserver,
    agreeing_rows,
    agreement_precision,
    certification_precision,
    hull_direction_ranks,
    log_ratio_disagreement,
    span_distance,
    teacher_feasible_fraction,
    teacher_feasible_rows,
    w_sum_error,
)
from .planted import TEST_SAMPLES, fit_timed, instance_streams, learn_planted, measure, plant_instance

__all__ = ["TEST_SAMPLES", "TeacherObserver", "agreeing_rows", "agreement_precision", "certification_precision",
           "compare_moment_route", "hull_direction_ranks", "log_ratio_disagreement", "fit_timed", "instance_streams",
           "learn_planted",
           "measure", "plant_instance", "seeded_rng", "span_distance", "teacher_feasible_fraction",
           "teacher_feasible_rows", "w_sum_error"]
