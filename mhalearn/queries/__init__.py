"""Learning a multi-head attention layer from queries: the oracle, the learner, the designs.

Bhattamishra, Shah, Hahn & Kanade, *Provably learning attention with
queries* (arXiv 2601.16873, ICML 2026), let the learner choose its inputs:

* :mod:`~mhalearn.queries.oracle` — :class:`QueryOracle`, a teacher that
  answers the sequences asked of it, with noise or rounding, and counts them;
* :mod:`~mhalearn.queries.designs` — the query designs and what their
  answers reveal (W from identical tokens, Θ from distinct ones);
* :mod:`~mhalearn.queries.learner` — :class:`QueryLearner`, the estimator;
* :mod:`~mhalearn.queries.identifiability` — two parameterisations of one
  map (:func:`non_identifiable_pair`, :func:`split_head`).
"""

from __future__ import annotations

from .identifiability import non_identifiable_pair, split_head
from .learner import QueryLearner, QueryReport, QueryStep
from .oracle import QueryOracle

__all__ = ["QueryLearner", "QueryOracle", "QueryReport", "QueryStep", "non_identifiable_pair", "split_head"]
