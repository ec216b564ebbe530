"""The query oracle: a teacher layer answering the sequences a learner chooses, and counting them.

Bhattamishra, Shah, Hahn & Kanade, *Provably learning attention with
queries* (arXiv 2601.16873, ICML 2026), give the learner black-box access to
a target model: it may submit any sequence of vectors and observe the
model's output, exactly (the O(d²) exact learner), up to an additive
tolerance, or (our addition) with Gaussian noise on every output entry.
:class:`QueryOracle` is that access for our layer F(X) = Σ_i softmax(X Θ_i
Xᵀ) X W_i: one query is one sequence X of shape (k, d), answered by the
k × d sequence F(X).  (The paper's regressor answers one number per
sequence, read at the last token through a value vector; ours answers every
row, so a query here carries k·d numbers.)
"""

from __future__ import annotations

import numpy as np

from .._validation import as_generator, check_boolean, check_inputs, check_instance, check_real
from ..attention.model import MultiHeadAttention


class QueryOracle:
    """Black-box access to a teacher layer: F(X) for the sequences a learner asks, counted.

    Parameters
    ----------
    teacher : MultiHeadAttention
        The layer answering the queries.  It is kept private: a learner
        must use the oracle only by calling it (and reading ``dim``),
        never by reading the teacher's parameters off the object.
    noise : float, default 0
        Standard deviation σ ≥ 0 of independent Gaussian noise added to every
        output entry, drawn afresh for every query (so asking a sequence
        twice gives two independent answers).
    tolerance : float or None, default None
        When given (τ > 0), every output entry is rounded to the nearest
        multiple of τ after the noise: the paper's oracle "up to additive
        tolerance" in its most adversarial deterministic form, an error of at
        most τ/2 per entry that asking again does not average away.
    allow_real : bool, default False
        Boolean tokens (entries ±1, the package's input law) only, unless
        True; then real-valued sequences are answered too and counted apart
        in ``real_queries``.
    rng : seed or numpy Generator, optional
        Source of the noise.

    Attributes
    ----------
    queries : int
        Sequences answered so far (a batch of n sequences counts n).
    real_queries : int
        How many of them had an entry other than ±1 (only with ``allow_real``).
    dim : int
        Token dimension d, the one thing the learner is told about the teacher.

    Notes
    -----
    Inputs are checked before anything is answered or counted: an array of
    shape (n, k, d) with n, k ≥ 1 and the teacher's d, finite numeric
    entries, and ±1 entries unless ``allow_real``.  A refused batch costs
    no query.
    """

    def __init__(self, teacher, *, noise: float = 0.0, tolerance: float | None = None, allow_real: bool = False,
                 rng=None):
        check_instance(teacher, "teacher", MultiHeadAttention)
        self._noise = check_real(noise, "noise", low=0.0)
        self._tolerance = None if tolerance is None else check_real(tolerance, "tolerance", low=0.0, low_open=True)
        check_instance(allow_real, "allow_real", (bool, np.bool_))
        self._allow_real = bool(allow_real)
        self._rng = as_generator(rng)
        self._teacher = teacher
        self.queries = 0
        self.real_queries = 0

    @property
    def dim(self) -> int:
        return self._teacher.dim

    @property
    def noise(self) -> float:
        return self._noise

    @property
    def tolerance(self) -> float | None:
        return self._tolerance

    @property
    def allow_real(self) -> bool:
        return self._allow_real

    @property
    def exact(self) -> bool:
        """Whether answers are F(X) to floating point (no noise, no rounding)."""
        return self._noise == 0.0 and self._tolerance is None

    def __repr__(self) -> str:
        return (f"QueryOracle(dim={self.dim}, noise={self._noise:g}, tolerance={self._tolerance}, "
                f"allow_real={self._allow_real}, queries={self.queries})")

    def __call__(self, X) -> np.ndarray:
        """F(X) for a batch X of shape (n, k, d), with the oracle's noise and rounding; counts n queries."""
        X = check_inputs(X, self.dim)
        real = ~np.all(np.abs(X) == 1.0, axis=(1, 2))
        if not self._allow_real:
            check_boolean(X, opt_in="allow_real=True in the QueryOracle")
        Y = self._teacher.predict(X)
        if self._noise > 0.0:
            Y = Y + self._noise * self._rng.standard_normal(Y.shape)
        if self._tolerance is not None:
            Y = self._tolerance * np.round(Y / self._tolerance)
        self.queries += X.shape[0]
        self.real_queries += int(np.count_nonzero(real))
        return Y


__all__ = ["QueryOracle"]
