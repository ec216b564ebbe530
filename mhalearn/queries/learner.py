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
checked before it is asked).  The queries are adaptive where attention is
sharp: a share below :data:`~mhalearn.queries.designs.SHARE_FLOOR` cannot be
read, its measurement is left out, and sets of tokens one or two flips
apart (smaller logit gaps) are asked until the readable measurements have
rank d².  With ``rank=r`` the paper's O(rd) compressed-sensing regime:
2r(2d − r) measurements, solved by alternating least squares.  Under noise
or rounding the same solves are least-squares estimates; ``repeats``
averages repeated answers (noise) and ``oversample`` asks more distinct
designs (noise and rounding, whose error repeated answers share), and the
polish refits every answer.

For m ≥ 2 the paper proves that the parameters are not identifiable from
queries in general and discusses learning under structural assumptions;
ours (:mod:`~mhalearn.queries.heads`) assumes generic heads.  W_Σ as above;
then, per coordinate s, a scan of 2m + 3 sequences whose answers are a
vector rational function with one pole per head gives the rows W_i[s, :];
one query per coordinate aligns the heads' labels; with every W_i known,
the two-token queries give each head's attention shares, hence each Θ_i as
for one head.  The queries number d² + (2m + 7)·d − 2 for the defaults
(d² = twice the single head's design, see ``oversample``;
:meth:`QueryLearner.planned_queries`), so choosing the inputs makes the cost
grow with m only through the scans.  Heads that cannot be told apart (two
heads with one Θ, :func:`~mhalearn.queries.non_identifiable_pair`) are
reported in ``report_.separable`` and ``report_.notes``.

The paper is cited by its stated results (its abstract and introduction,
arXiv v2): its theorem and section numbers, and its algorithms in detail,
could not be read where this was written.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from .._estimator import Estimator, check_fitted, pooled_r2, store_parameters
from .._validation import Integer, Options, Real, Seed, as_generator, check_inputs, check_pair
from ..attention.model import MultiHeadAttention, relative_error
from ..learners.least_squares import lbfgs_refine
from . import designs, heads
from .oracle import QueryOracle

#: Relative squared misfit of the fitted layer to an exact oracle's answers above which the fit is flagged.
RESIDUAL_CEILING = 1e-12
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
    """What :meth:`QueryLearner.fit` did: its steps, the queries in all and the real-valued ones.

    ``separable`` (m ≥ 2): whether every coordinate's scan told the heads
    apart; ``sum_mismatch``: ‖Σ_i Ŵ_i − Ŵ_Σ‖_F / ‖Ŵ_Σ‖_F, the scanned rows
    against the identical-token solve; ``residual``: the fitted layer's
    relative squared error on the answers it was given (sequences of
    ``length`` tokens) — with an exact oracle, a certificate that needs no
    teacher: near 0 when every answer is explained, and above
    :data:`RESIDUAL_CEILING` it adds a note.  ``notes`` say what failed.
    """

    steps: tuple[QueryStep, ...]
    queries: int
    real_queries: int
    total_seconds: float
    notes: tuple[str, ...] = field(default=())
    separable: bool | None = None
    sum_mismatch: float | None = None
    residual: float | None = None

    def queries_by_step(self) -> dict[str, int]:
        return {step.name: step.queries for step in self.steps}

    def as_dict(self) -> dict:
        return {"steps": [asdict(step) for step in self.steps], "queries": self.queries,
                "real_queries": self.real_queries, "total_seconds": self.total_seconds, "notes": list(self.notes),
                "separable": self.separable, "sum_mismatch": self.sum_mismatch,
                "residual": self.residual}

    def table(self) -> str:
        lines = [f"{'step':<12} {'queries':>8} {'seconds':>8} {'measurements':>12} {'rank':>6}"]
        for step in self.steps:
            lines.append(f"{step.name:<12} {step.queries:>8} {step.seconds:>8.3f} "
                         f"{'' if step.measurements is None else step.measurements:>12} "
                         f"{'' if step.rank is None else step.rank:>6}")
        lines.append(f"{'total':<12} {self.queries:>8} {self.total_seconds:>8.3f}")
        return "\n".join(lines + list(self.notes))


class _Answers:
    """The answers of a transcript as a predictor of the sequences asked, for :func:`~mhalearn.relative_error`."""

    def __init__(self, Y: np.ndarray):
        self.Y = Y

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.Y


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

    def pairs(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Every sequence of ``length`` tokens asked so far (once each) and its averaged answer, (n, k, d) both.

        The scans of m ≥ 2 have their own length; the kernels take one length a batch.
        """
        kept = [index for index, sequences in enumerate(self.sequences) if sequences.shape[1] == length]
        return (np.concatenate([self.sequences[index] for index in kept]),
                np.concatenate([self.answers[index] for index in kept]))


def _full_rank_design(dim: int, distinct: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """At least ``count`` token sets whose measurements have rank d², drawing more until they do."""
    sets = designs.draw_token_sets(count, distinct, dim, rng)
    extra = max(1, count // 8)
    for _ in range(_MAX_DESIGN_ROUNDS):
        if designs.design_rank(sets) == dim * dim:
            return sets
        sets = np.concatenate([sets, designs.draw_token_sets(extra, distinct, dim, rng)])
    raise RuntimeError(f"no full-rank design after {len(sets)} token sets of {distinct} tokens in d = {dim}")


def _readable_rank(sets: np.ndarray, weights: np.ndarray) -> int:
    """Rank of the measurements of ``sets`` whose weight is not 0 (whose shares were read)."""
    return int(np.linalg.matrix_rank(designs.measurement_matrices(sets)[weights > 0]))


class QueryLearner(Estimator):
    """Learn a multi-head attention layer from queries to a :class:`~mhalearn.QueryOracle`.

    Parameters
    ----------
    heads : int
        Number of heads m of the layer to learn (m = 1 is the paper's exact
        learner; m ≥ 2 needs 2m ≤ d and generic heads, see the module).
    length : int, default 4
        Tokens k per query sequence (k ≥ 2: a one-token sequence shows no attention).
    distinct : int, default 2
        Distinct tokens t per Θ-query, 2 ≤ t ≤ min(k, d + 1); each query
        gives t(t − 1) measurements of Θ, so Θ takes ⌈d² / (t(t − 1))⌉ queries.
        t = 2 is the paper's two-token query.
    repeats : int, default 1
        Times each designed sequence is asked, the answers averaged (divides
        the noise variance; useless against rounding).
    oversample : float or None, default None
        Factor ≥ 1 on the number of designed sequences (d for W_Σ,
        d²/(t(t − 1)) for Θ); more distinct measurements average noise and
        rounding alike.  None: 1 for one head, 2 for several, whose Θ-step
        solves m shares per row through the scanned W_i and amplifies their
        rounding errors (~1e-9) unless the design is overdetermined.
    refine : {"auto", "lbfgs", "none"}, default "auto"
        Whether to polish the solved layer by L-BFGS on the squared error of
        every answer to a sequence of ``length`` tokens (no new query): the
        least-squares estimate of the parameters from those answers, the
        maximum-likelihood one under Gaussian noise.  ``"auto"`` polishes when
        the oracle is not exact, or when the solved layer misses an exact
        oracle's answers by more than :data:`RESIDUAL_CEILING`, unless
        ``rank`` is given (the answers then leave a full Θ underdetermined).
    refine_iter : int, default 500
        Iteration budget of the polish.
    scan_length : int or None, default None
        m ≥ 2: length L of the scan sequences that separate the heads' rows
        (L − 1 queries per coordinate, L ≥ 2m + 2); None for 2m + 4.
    tries : int, default 5
        m ≥ 2: base tokens tried per coordinate before the heads are reported
        inseparable there.
    rank : int or None, default None
        When given (r ≤ d), every Θ_i is taken to have rank ≤ r and is solved
        by :func:`~mhalearn.queries.designs.solve_low_rank` from
        ⌈oversample · 2r(2d − r) / (t(t − 1))⌉ Θ-queries (at most the full
        design): the paper's O(rd) compressed-sensing regime.
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
        "oversample": [Real(1.0), None],
        "refine": [Options("auto", "lbfgs", "none")],
        "refine_iter": [Integer(1)],
        "scan_length": [Integer(3), None],
        "tries": [Integer(1)],
        "rank": [Integer(1), None],
        "random_state": [Seed()],
    }

    def __init__(self, heads: int = 1, *, length: int = 4, distinct: int = 2, repeats: int = 1,
                 oversample: float | None = None, refine: str = "auto", refine_iter: int = 500,
                 scan_length: int | None = None, tries: int = 5, rank: int | None = None, random_state=None):
        store_parameters(self, locals())

    def fit(self, oracle) -> "QueryLearner":
        """Ask ``oracle`` the designed sequences and solve for the layer; returns self."""
        self._check_params()
        if not isinstance(oracle, QueryOracle):
            raise TypeError(f"oracle: expected a QueryOracle, received {type(oracle).__name__}")
        dim = oracle.dim
        self._check_sizes(dim)
        rng = as_generator(self.random_state)
        started, asked, real = time.perf_counter(), oracle.queries, oracle.real_queries
        ask = _Transcript(oracle, self.repeats)
        steps, projection = self._fit_projection(ask, dim, rng)
        notes, separable, mismatch = (), None, None
        if self.heads == 1:
            projections = projection[None]
        else:
            head_steps, projections, notes = self._fit_head_projections(ask, projection, rng)
            steps += head_steps
            separable = not notes
            mismatch = float(np.linalg.norm(projections.sum(axis=0) - projection) / np.linalg.norm(projection))
        theta_step, thetas = self._fit_thetas(ask, projections, rng)
        steps.append(theta_step)
        model = MultiHeadAttention(thetas, projections)
        X, Y = ask.pairs(self.length)
        residual = relative_error(model, _Answers(Y), X)
        # An exact oracle's answers that the solved layer misses (a head's rows read imprecisely by its scan)
        # are worth a polish too: they are then the least-squares problem's exact data.
        # Not for a low-rank design: its answers are fewer than a full Θ's unknowns, so a polish of Θ's d²
        # entries would wander off along the directions they leave free.
        wanted = not oracle.exact or residual > RESIDUAL_CEILING
        if self.refine == "lbfgs" or (self.refine == "auto" and wanted and self.rank is None):
            step_started = time.perf_counter()
            model, _ = lbfgs_refine(X, Y, model.thetas, model.ws, max_iter=self.refine_iter)
            residual = relative_error(model, _Answers(Y), X)
            steps.append(QueryStep("polish", 0, time.perf_counter() - step_started, measurements=Y.size))
        if oracle.exact and residual > RESIDUAL_CEILING:
            notes += (f"the fitted layer misses the exact answers it was given by {residual:.1e} (relative squared "
                      f"error, above {RESIDUAL_CEILING:g})",)
        self.model_ = model
        self.report_ = QueryReport(tuple(steps), oracle.queries - asked, oracle.real_queries - real,
                                   time.perf_counter() - started, notes, separable, mismatch, residual)
        self.n_features_in_ = dim
        return self

    def planned_queries(self, dim: int) -> int:
        """The sequences a fit asks of an oracle of token dimension ``dim``, before any redrawn design.

        W_Σ: ⌈oversample·d⌉; for m ≥ 2 the scans, d·(L − 1), and the
        alignment, 2(d − 1); Θ: ⌈oversample·d²/(t(t − 1))⌉, plus an eighth of
        it per round in the rare design short of rank d²; each × ``repeats``.
        """
        self._check_params()
        oversample = self._oversample()
        heads_part = 0 if self.heads == 1 else dim * (self._scan_length() - 1) + 2 * (dim - 1)
        return self.repeats * (math.ceil(oversample * dim) + self._theta_queries(dim) + heads_part)

    def _theta_queries(self, dim: int) -> int:
        """Θ-queries of the design: d² measurements, or 2r(2d − r) when Θ has rank ≤ r, over t(t − 1) a query."""
        t, oversample = self.distinct, self._oversample()
        full = math.ceil(oversample * dim * dim / (t * (t - 1)))
        if self.rank is None:
            return full
        return min(full, math.ceil(oversample * 2 * self.rank * (2 * dim - self.rank) / (t * (t - 1))))

    def _check_sizes(self, dim: int) -> None:
        """The sizes the solves need, checked before any query."""
        if self.rank is not None and self.rank > dim:
            raise ValueError(f"rank: expected at most d = {dim}, received {self.rank}")
        if self.distinct > min(self.length, dim + 1):
            raise ValueError(f"distinct: expected at most min(length, d + 1) = {min(self.length, dim + 1)} "
                             f"distinct tokens per query, received {self.distinct}")
        if self.heads * (self.distinct - 1) > dim:
            raise ValueError(f"heads: the shares of {self.heads} heads in {self.distinct}-token queries are "
                             f"{self.heads * (self.distinct - 1)} unknowns in d = {dim} equations; expected "
                             f"heads·(distinct − 1) ≤ d")
        if self.heads >= 2 and 2 * self.heads > dim:
            raise ValueError(f"heads: aligning the rows of {self.heads} heads solves 2m = {2 * self.heads} shares "
                             f"in d = {dim} equations; expected 2·heads ≤ d")
        if self.heads >= 2 and self._scan_length() < 2 * self.heads + 2:
            raise ValueError(f"scan_length: expected at least 2·heads + 2 = {2 * self.heads + 2} tokens, so that "
                             f"a scan has 2m + 1 points, received {self.scan_length}")

    def _oversample(self) -> float:
        return (1.0 if self.heads == 1 else 2.0) if self.oversample is None else self.oversample

    def _scan_length(self) -> int:
        return 2 * self.heads + 4 if self.scan_length is None else self.scan_length

    def _fit_projection(self, ask: _Transcript, dim: int,
                        rng: np.random.Generator) -> tuple[list[QueryStep], np.ndarray]:
        """Step 1: Ŵ_Σ from identical-token sequences (the basis, then random tokens when oversampling)."""
        started, asked = time.perf_counter(), ask.oracle.queries
        tokens = designs.basis_tokens(dim)
        extra = math.ceil(self._oversample() * dim) - dim
        if extra > 0:
            tokens = np.concatenate([tokens, rng.choice(np.array([-1.0, 1.0]), size=(extra, dim))])
        answers = ask(designs.identical_sequences(tokens, self.length))
        projection = designs.read_projection(tokens, answers)
        step = QueryStep("projection", ask.oracle.queries - asked, time.perf_counter() - started,
                         measurements=len(tokens), rank=dim)
        return [step], projection

    def _fit_head_projections(self, ask: _Transcript, projection: np.ndarray, rng: np.random.Generator):
        """Steps 2–3 (m ≥ 2): each coordinate's rows W_i[s, :] from a scan, then their labels aligned."""
        m, dim = self.heads, projection.shape[0]
        started, asked = time.perf_counter(), ask.oracle.queries
        rows, notes, tried = np.zeros((dim, m, dim)), [], 0
        for coordinate in range(dim):
            for _ in range(self.tries):
                tried += 1
                base = rng.choice(np.array([-1.0, 1.0]), size=dim)
                sequences, fractions = heads.scan_sequences(base, coordinate, self._scan_length())
                values = heads.scan_values(base, ask(sequences), fractions, projection)
                separation = heads.separate_heads(fractions, values, m)
                if separation.separable:
                    break
            else:
                notes.append(f"coordinate {coordinate}: heads not separated after {self.tries} tokens "
                             f"({separation.reason})")
            rows[coordinate] = separation.vectors / (-2.0 * base[coordinate])
        scan = QueryStep("rows", ask.oracle.queries - asked, time.perf_counter() - started, measurements=tried)
        started, asked = time.perf_counter(), ask.oracle.queries
        projections = np.zeros((m, dim, dim))
        projections[:, 0, :] = rows[0]
        for coordinate in range(1, dim):
            bases = rng.choice(np.array([-1.0, 1.0]), size=(2, dim))
            pairs = np.stack([bases, heads.flipped(bases, [0, coordinate])], axis=1)
            answers = ask(designs.spread_sequences(pairs, self.length)[0])
            costs = heads.alignment_costs(bases, answers, projection, rows[0], rows[coordinate], coordinate)
            projections[:, coordinate, :] = rows[coordinate][linear_sum_assignment(costs)[1]]
        align = QueryStep("align", ask.oracle.queries - asked, time.perf_counter() - started,
                          measurements=dim - 1)
        return [scan, align], projections, tuple(notes)

    def _fit_thetas(self, ask: _Transcript, projections: np.ndarray,
                    rng: np.random.Generator) -> tuple[QueryStep, np.ndarray]:
        """The last step: each Θ̂_i from the logit differences that t-token sequences reveal, head by head."""
        started, asked = time.perf_counter(), ask.oracle.queries
        dim, t = projections.shape[1], self.distinct
        count = self._theta_queries(dim)
        low_rank = self.rank is not None and self.rank < dim
        sets = designs.draw_token_sets(count, t, dim, rng) if low_rank else _full_rank_design(dim, t, count, rng)
        values, weights, clipped = self._read(ask, sets, projections)
        for round_ in range(0 if low_rank else _MAX_DESIGN_ROUNDS):
            # Adaptive queries: where sharp attention left some measurements unread (weight 0), ask sets of
            # nearby tokens, whose logit gaps are smaller, until every head's readable ones have rank d².
            readable = min(_readable_rank(sets, head_weights) for head_weights in weights)
            if readable == dim * dim:
                break
            extra = designs.draw_near_sets(max(1, count // 8), t, dim, 1 + round_ % 2, rng)
            more_values, more_weights, more_clipped = self._read(ask, extra, projections)
            sets = np.concatenate([sets, extra])
            values, weights = np.concatenate([values, more_values], 1), np.concatenate([weights, more_weights], 1)
            clipped += more_clipped
        matrices = designs.measurement_matrices(sets)
        # Weighted even for an exact oracle: a share near zero, read through W_i rows that the scans know to
        # ~1e-9 only (m ≥ 2), has a logarithm far off, which the weight silences.
        if low_rank:
            # Unweighted for exact answers: the alternation's basin is the wider for it (the weights only
            # matter where the answers carry error).
            solved = [designs.solve_low_rank(matrices, head_values, self.rank,
                                             None if ask.oracle.exact else head_weights)
                      for head_values, head_weights in zip(values, weights)]
            rank = self.rank
        else:
            solved = [designs.solve_measurements(matrices, head_values, head_weights)
                      for head_values, head_weights in zip(values, weights)]
            rank = min(_readable_rank(sets, head_weights) for head_weights in weights)
        step = QueryStep("theta", ask.oracle.queries - asked, time.perf_counter() - started,
                         measurements=values.size, rank=rank, clipped=clipped)
        return step, np.stack([theta for theta, _ in solved])

    def _read(self, ask: _Transcript, sets: np.ndarray, projections: np.ndarray):
        """Ask the sets' sequences and read their logit measurements (values, weights, clipped shares)."""
        sequences, counts = designs.spread_sequences(sets, self.length)
        return designs.read_logit_measurements(sets, counts, ask(sequences), projections)

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


__all__ = ["RESIDUAL_CEILING", "QueryLearner", "QueryReport", "QueryStep"]
