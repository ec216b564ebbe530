"""Errors against a planted teacher, recorded by the learners' phases for the report.

A learner fitted with ``fit(X, Y, diagnostics=TeacherDiagnostics(teacher))``
(or ``fit(X, Y, teacher=...)``, short for it) hands its phases this one hook;
each phase asks it for the figures it can measure (Ŵ_Σ error, precision of
agreement rows, share of constraints the heads satisfy, span distance,
parameter error).  Without a teacher every figure is None and
:meth:`TeacherDiagnostics.put` records nothing, so the phases never branch on
the teacher themselves.  The teacher is never used to compute the estimate
(docs/design.md §4).
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
        if teacher is not None and not isinstance(teacher, MultiHeadAttention):
            raise TypeError(f"teacher: expected a MultiHeadAttention or None, received {type(teacher).__name__}")
        self.teacher = teacher

    @classmethod
    def resolve(cls, teacher, diagnostics, *, heads: int, dim: int) -> "TeacherDiagnostics":
        """The hook of a fit given ``fit``'s ``teacher`` and ``diagnostics`` (at most one), checked
        against the learner's m heads and the data's dimension d."""
        if diagnostics is None:
            diagnostics = cls(teacher)
        elif teacher is not None:
            raise ValueError("teacher: expected either teacher or diagnostics, received both")
        elif not isinstance(diagnostics, TeacherDiagnostics):
            raise TypeError(f"diagnostics: expected a TeacherDiagnostics or None, received "
                            f"{type(diagnostics).__name__}")
        truth = diagnostics.teacher
        if truth is not None and (truth.dim != dim or truth.heads != heads):
            raise ValueError(f"teacher: expected {heads} heads of dim {dim}, received {truth.heads} heads "
                             f"of dim {truth.dim}")
        return diagnostics

    def in_units(self, x_scale: float, y_scale: float) -> "TeacherDiagnostics":
        """The same hook for data standardised to X / x_scale, Y / y_scale (Θ·x_scale², W·x_scale/y_scale)."""
        if self.teacher is None:
            return self
        return type(self)(MultiHeadAttention(self.teacher.thetas * x_scale ** 2,
                                             self.teacher.ws * (x_scale / y_scale)))

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
