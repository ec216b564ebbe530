"""Errors against a planted teacher, recorded by the learners' phases for the report.

A learner fitted with ``fit(X, Y, teacher=...)`` hands its phases one
:class:`TeacherDiagnostics`; each phase asks it for the figures it can
measure (Ŵ_Σ error, precision of agreement rows, share of constraints the
heads satisfy, span distance, parameter error).  Without a teacher every
figure is None and :meth:`TeacherDiagnostics.put` records nothing, so the
phases never branch on the teacher themselves.  The teacher is never used to
compute the estimate.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import subspace_angles

from ..attention.model import MultiHeadAttention, parameter_error
from .agreement import agreement_precision
from .projection_sum import certification_precision


def span_distance(basis: np.ndarray, teacher: MultiHeadAttention) -> float:
    """sin of the largest principal angle between span(basis) and span{vec Θ_i}.

    ``basis`` has shape (r, d, d) or (r, d²); 0 means the spans agree, 1 that
    some teacher direction is orthogonal to the estimate.
    """
    estimate = np.asarray(basis).reshape(len(basis), -1).T
    truth = teacher.thetas.reshape(teacher.heads, -1).T
    return float(np.sin(np.max(subspace_angles(estimate, truth))))


class TeacherDiagnostics:
    """The teacher's view of a fit in progress (figures are None without a teacher)."""

    def __init__(self, teacher: MultiHeadAttention | None = None):
        self.teacher = teacher

    def __bool__(self) -> bool:
        return self.teacher is not None

    @staticmethod
    def put(entry: dict, **figures) -> None:
        """Record the figures that are not None in ``entry``."""
        entry.update({key: value for key, value in figures.items() if value is not None})

    def w_sum_error(self, w_sum: np.ndarray | None) -> float | None:
        """‖Ŵ_Σ − W_Σ‖_F / ‖W_Σ‖_F."""
        if self.teacher is None or w_sum is None:
            return None
        truth = self.teacher.projection_sum
        return float(np.linalg.norm(w_sum - truth) / np.linalg.norm(truth))

    def span_distance(self, basis: np.ndarray | None) -> float | None:
        """sin of the largest principal angle between span(basis) and span{Θ_i}."""
        if self.teacher is None or basis is None or not np.any(basis):
            return None
        return span_distance(np.atleast_2d(basis.reshape(-1, self.teacher.dim ** 2)), self.teacher)

    def agreement_precision(self, rows, tolerance: float = 0.1) -> float | None:
        return None if self.teacher is None else agreement_precision(rows, self.teacher, tolerance)

    def feasible_fraction(self, slabs) -> float | None:
        return None if self.teacher is None else slabs.teacher_feasible_fraction(self.teacher)

    def certification_precision(self, candidates, certified, eta: float) -> float | None:
        return None if self.teacher is None else certification_precision(self.teacher, candidates, certified, eta)

    def parameter_error(self, model: MultiHeadAttention | None) -> float | None:
        if self.teacher is None or model is None:
            return None
        return parameter_error(model, self.teacher)["total"]
