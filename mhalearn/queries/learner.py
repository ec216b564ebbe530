"""QueryLearner: a multi-head attention layer learned from the sequences it chooses to ask.

Bhattamishra, Shah, Hahn & Kanade, *Provably learning attention with
queries* (arXiv 2601.16873, ICML 2026), learn a single softmax head exactly
from O(d²) adaptive queries.  Their regressor reads one query token (the
last) through a merged query–key matrix and a value vector and answers a
number; our layer maps a k × d sequence to a k × d sequence through Θ and
a d × d projection W, so the algorithm is adapted (:mod:`~mhalearn.queries.designs`):

1. **W** from d sequences of identical tokens (uniform attention);
2. **Θ** from sequences of t distinct tokens (t = 2: the paper's two-token
   queries), whose answers reveal each row's attention shares, hence the
   logit differences u_ℓᵀ Θ (u_s − u_1): d² independent linear measurements
   of Θ, solved by least squares.

With an exact oracle and Boolean tokens both solves are exact to floating
point, after d + ⌈d² / (t(t − 1))⌉ queries (rank permitting: the design is
checked before it is asked).  Under noise or rounding the same solves are
least-squares estimates; ``repeats`` averages repeated answers (noise) and
``oversample`` asks more distinct designs (noise and rounding, whose error
repeated answers share).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .._estimator import Estimator, check_fitted, pooled_r2, store_parameters
from .._validation import Integer, Options, Real, Seed, as_generator, check_inputs, check_pair
from ..attention.model import MultiHeadAttention
from ..learners.least_squares import lbfgs_refine
from . import designs
from .oracle import QueryOracle

#: How many rounds of extra token sets :func:`_full_rank_design` draws before giving up.
_MAX_DESIGN_ROUNDS = 50


@dataclass(frozen=True)
class QueryStep:
    """One step of a query fit: its name, the sequences it asked, and what it solved.

    ``measurements`` and ``rank`` are those of the linear system the step
    solved (Θ: the logit differences and their rank, d² when Θ is fixed);
    ``clipped`` counts attention shares within the oracle's error of zero.
    """

    name: str
    queries: int
    seconds: float
    measurements: int | None = None
    rank: int | None = None
    clipped: int | None = None


@dataclass(frozen=True)
class QueryReport:
    """What :meth:`QueryLearner.fit` did: its steps, the queries in all and the real-valued ones."""

    steps: tuple[QueryStep, ...]
    queries: int
    real_queries: int
    total_seconds: float
    notes: tuple[str, ...] = field(default=())

    def queries_by_step(self) -> dict[str, int]:
        return {step.name: step.queries for step in self.steps}

    def as_dict(self) -> dict:
        return {"steps": [asdict(step) for step in self.steps], "queries": self.queries,
                "real_queries": self.real_queries, "total_seconds": self.total_seconds, "notes": list(self.notes)}

    def table(self) -> str:
        lines = [f"{'step':<12} {'queries':>8} {'seconds':>8} {'measurements':>12} {'rank':>6}"]
        for step in self.steps:
            lines.append(f"{step.name:<12} {step.queries:>8} {step.seconds:>8.3f} "
                         f"{'' if step.measurements is None else step.measurements:>12} "
                         f"{'' if step.rank is None else step.rank:>6}")
        lines.append(f"{'total':<12} {self.queries:>8} {self.total_seconds:>8.3f}")
        return "\n".join(lines + list(self.notes))


class _Transcript:
    """The oracle as a fit uses it: each designed sequence asked ``repeats`` times, the answers averaged and kept.

    The kept pairs are what the polish fits; averaging the repeats first
    leaves the least-squares objective's minimiser unchanged.
    """

    def __init__(self, oracle: QueryOracle, repeats: int):
        self.oracle, self.repeats = oracle, repeats
        self.sequences: list[np.ndarray] = []
        self.answers: list[np.ndarray] = []

    def __call__(self, X: np.ndarray) -> np.ndarray:
        if self.repeats == 1:
            answers = self.oracle(X)
        else:
            answers = self.oracle(np.repeat(X, self.repeats, axis=0))
            answers = answers.reshape(X.shape[0], self.repeats, *X.shape[1:]).mean(axis=1)
        self.sequences.append(X)
        self.answers.append(answers)
        return answers

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every sequence asked so far (once each) and its averaged answer, (n, k, d) both."""
        return np.concatenate(self.sequences), np.concatenate(self.answers)


def _full_rank_design(dim: int, distinct: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """At least ``count`` token sets whose measurements have rank d², drawing more until they do."""
    sets = designs.draw_token_sets(count, distinct, dim, rng)
    extra = max(1, count // 8)
    for _ in range(_MAX_DESIGN_ROUNDS):
        if designs.design_rank(sets) == dim * dim:
            return sets
        sets = np.concatenate([sets, designs.draw_token_sets(extra, distinct, dim, rng)])
    raise RuntimeError(f"no full-rank design after {len(sets)} token sets of {distinct} tokens in d = {dim}")


class QueryLearner(Estimator):
    """Learn a multi-head attention layer from queries to a :class:`~mhalearn.QueryOracle`.

    Parameters
    ----------
    heads : int
        Number of heads m of the layer to learn (m = 1 is the paper's exact
        learner).
    length : int, default 4
        Tokens k per query sequence (k ≥ 2: a one-token sequence shows no attention).
    distinct : int, default 2
        Distinct tokens t per Θ-query, 2 ≤ t ≤ min(k, d + 1); each query
        gives t(t − 1) measurements of Θ, so Θ takes ⌈d² / (t(t − 1))⌉ queries.
        t = 2 is the paper's two-token query.
    repeats : int, default 1
        Times each designed sequence is asked, the answers averaged (divides
        the noise variance; useless against rounding).
    oversample : float, default 1
        Factor ≥ 1 on the number of designed sequences (d for W, d²/(t(t − 1))
        for Θ); more distinct measurements average noise and rounding alike.
    refine : {"auto", "lbfgs", "none"}, default "auto"
        Whether to polish the solved layer by L-BFGS on the squared error of
        every answer received (no new query): the least-squares estimate of
        the parameters from all the answers, the maximum-likelihood one under
        Gaussian noise.  ``"auto"`` polishes when the oracle is not exact.
    refine_iter : int, default 500
        Iteration budget of the polish.
    random_state : seed or numpy Generator, optional
        Source of the random token sets.

    Attributes
    ----------
    model_ : MultiHeadAttention
        The fitted layer.
    report_ : QueryReport
        The queries each step asked and what it solved.
    n_features_in_ : int
        Token dimension d (set last: the learner is fitted).

    Notes
    -----
    Boolean tokens only: the learner never needs the oracle's ``allow_real``.
    Its error is the function's, :func:`mhalearn.relative_error` against the
    teacher on fresh inputs, as for every learner of the package.

    References
    ----------
    Bhattamishra, S., Shah, K., Hahn, M. & Kanade, V., *Provably learning
    attention with queries*, arXiv 2601.16873 (2026): the exact single-head
    learner from O(d²) queries and its noisy-oracle variant.
    """

    _parameter_constraints = {
        "heads": [Integer(1)],
        "length": [Integer(2)],
        "distinct": [Integer(2)],
        "repeats": [Integer(1)],
        "oversample": [Real(1.0)],
        "refine": [Options("auto", "lbfgs", "none")],
        "refine_iter": [Integer(1)],
        "random_state": [Seed()],
    }

    def __init__(self, heads: int = 1, *, length: int = 4, distinct: int = 2, repeats: int = 1,
                 oversample: float = 1.0, refine: str = "auto", refine_iter: int = 500, random_state=None):
        store_parameters(self, locals())

    def fit(self, oracle) -> "QueryLearner":
        """Ask ``oracle`` the designed sequences and solve for the layer; returns self."""
        self._check_params()
        if not isinstance(oracle, QueryOracle):
            raise TypeError(f"oracle: expected a QueryOracle, received {type(oracle).__name__}")
        dim = oracle.dim
        if self.distinct > min(self.length, dim + 1):
            raise ValueError(f"distinct: expected at most min(length, d + 1) = {min(self.length, dim + 1)} "
                             f"distinct tokens per query, received {self.distinct}")
        rng = as_generator(self.random_state)
        started, asked, real = time.perf_counter(), oracle.queries, oracle.real_queries
        ask = _Transcript(oracle, self.repeats)
        steps, projection = self._fit_projection(ask, dim, rng)
        if self.heads == 1:
            theta_step, theta = self._fit_single_theta(ask, projection, rng)
            steps.append(theta_step)
            model = MultiHeadAttention(theta[None], projection[None])
            notes = ()
        else:
            raise NotImplementedError("QueryLearner learns one head; m ≥ 2 is not implemented")
        if self.refine == "lbfgs" or (self.refine == "auto" and not oracle.exact):
            step_started = time.perf_counter()
            X, Y = ask.pairs()
            model, history = lbfgs_refine(X, Y, model.thetas, model.ws, max_iter=self.refine_iter)
            steps.append(QueryStep("polish", 0, time.perf_counter() - step_started, measurements=Y.size))
        self.model_ = model
        self.report_ = QueryReport(tuple(steps), oracle.queries - asked, oracle.real_queries - real,
                                   time.perf_counter() - started, notes)
        self.n_features_in_ = dim
        return self

    def _fit_projection(self, ask: _Transcript, dim: int,
                        rng: np.random.Generator) -> tuple[list[QueryStep], np.ndarray]:
        """Step 1: Ŵ_Σ from identical-token sequences (the basis, then random tokens when oversampling)."""
        started, asked = time.perf_counter(), ask.oracle.queries
        tokens = designs.basis_tokens(dim)
        extra = math.ceil(self.oversample * dim) - dim
        if extra > 0:
            tokens = np.concatenate([tokens, rng.choice(np.array([-1.0, 1.0]), size=(extra, dim))])
        answers = ask(designs.identical_sequences(tokens, self.length))
        projection = designs.read_projection(tokens, answers)
        step = QueryStep("projection", ask.oracle.queries - asked, time.perf_counter() - started,
                         measurements=len(tokens), rank=dim)
        return [step], projection

    def _fit_single_theta(self, ask: _Transcript, projection: np.ndarray,
                          rng: np.random.Generator) -> tuple[QueryStep, np.ndarray]:
        """Step 2 (m = 1): Θ̂ from the logit differences that t-token sequences reveal."""
        started, asked = time.perf_counter(), ask.oracle.queries
        dim, t = projection.shape[0], self.distinct
        sets = _full_rank_design(dim, t, math.ceil(self.oversample * dim * dim / (t * (t - 1))), rng)
        sequences, counts = designs.spread_sequences(sets, self.length)
        answers = ask(sequences)
        values, weights, clipped = designs.read_logit_measurements(sets, counts, answers, projection)
        theta, rank = designs.solve_measurements(designs.measurement_matrices(sets), values,
                                                 None if ask.oracle.exact else weights)
        step = QueryStep("theta", ask.oracle.queries - asked, time.perf_counter() - started,
                         measurements=len(values), rank=rank, clipped=clipped)
        return step, theta

    # ------------------------------------------------------------------ use
    def predict(self, X) -> np.ndarray:
        """F̂(X), shape (n, k, d), of the fitted layer."""
        check_fitted(self)
        return self.model_.predict(check_inputs(X, self.n_features_in_))

    def score(self, X, Y) -> float:
        """R² of the predictions, pooled over every output entry (:func:`mhalearn._estimator.pooled_r2`)."""
        check_fitted(self)
        X, Y = check_pair(X, Y, self.n_features_in_)
        return pooled_r2(Y.reshape(len(Y), -1), self.predict(X).reshape(len(Y), -1))


__all__ = ["QueryLearner", "QueryReport", "QueryStep"]
