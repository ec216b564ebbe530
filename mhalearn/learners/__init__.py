"""Learners of a multi-head attention layer, one module per family (docs/design.md §4).

:data:`LEARNERS` maps the names used by experiments and the CLI (``sculpt``,
``gradient``, ``moment``) to estimator classes.  Every class takes ``heads``
as its first argument and ``random_state`` as a keyword, and offers
``fit(X, Y, teacher=None) -> self``, ``predict``, ``score`` (R² pooled over
every output entry: they are scikit-learn regressors), ``model_`` and
``report_`` (typed, with ``table()`` and ``as_dict()``: :mod:`~mhalearn.learners.report`);
the contract they share is in :mod:`mhalearn._estimator`.
"""

from __future__ import annotations

from .._validation import add_unique, registered

LEARNERS: dict[str, type] = {}


def register_learner(name: str):
    """Class decorator adding a learner to :data:`LEARNERS` under ``name``."""
    def decorate(cls):
        return add_unique(LEARNERS, name, cls, "learner")
    return decorate


def get_learner(name: str) -> type:
    """The learner class called ``name``; unknown names list the valid ones."""
    return registered(LEARNERS, name, "learner")


def make_learner(name: str, heads: int, **params):
    """Construct the named learner with ``heads`` and keyword hyper-parameters."""
    return get_learner(name)(heads, **params)


__all__ = ["LEARNERS", "get_learner", "make_learner", "register_learner"]

# Importing the modules registers the learners.
from .gradient import GradientLearner  # noqa: E402

__all__ += ["GradientLearner"]
from .sculpt import SculptLearner  # noqa: E402

__all__ += ["SculptLearner"]
from .moment import MomentLearner  # noqa: E402

__all__ += ["MomentLearner"]
from .report import format_phase_table  # noqa: E402

__all__ += ["format_phase_table"]
