"""Learners of a multi-head attention layer ([design: learners]).

- :mod:`mhalearn.learners.chen_li` — Chen & Li's learner, one module per
  phase, chained by :func:`~mhalearn.learners.chen_li.sculpt_fit`;
  :class:`SculptLearner` wraps it;
- beside it, the baselines a researcher compares against:
  :class:`MomentLearner` (our moment route to the span, then Chen & Li's
  phases 5–6) and :class:`GradientLearner` (gradient descent).

:data:`~mhalearn.learners.registry.LEARNERS` maps the names used by experiments and the CLI (``sculpt``,
``gradient``, ``moment``) to the classes.  Every class takes ``heads`` as its
first argument and ``random_state`` as a keyword (the span-search learners'
rarer knobs are grouped in :class:`BodySettings` and :class:`SearchSettings`,
reached by scikit-learn's nested names such as ``body__quantile``), and offers ``fit(X, Y,
callback=None) -> self``, ``predict``, ``score`` (R² pooled over every output
entry: they are scikit-learn regressors), ``model_`` and ``report_`` (typed,
with ``table()`` and ``as_dict()``: :mod:`~mhalearn.learners.report`).
``callback(phase, result)`` observes each phase result and never changes the
fit (:class:`mhalearn.evaluation.TeacherObserver` is the teacher's view).
"""

from __future__ import annotations

from .chen_li.settings import BodySettings, SearchSettings
from .gradient import GradientLearner
from .moment import MomentLearner
from .registry import LEARNERS, get_learner, make_learner, register_learner
from .sculpt import SculptLearner

__all__ = ["LEARNERS", "BodySettings", "GradientLearner", "MomentLearner", "SculptLearner", "SearchSettings",
           "get_learner", "make_learner", "register_learner"]
