"""The query designs of :class:`~mhalearn.queries.QueryLearner` and what their answers reveal.

Two readings carry the single-head learner, both exact with Boolean tokens
(Bhattamishra, Shah, Hahn & Kanade, *Provably learning attention with
queries*, arXiv 2601.16873: the O(d²) exact learner of a single head):

* **Identical tokens reveal W.**  In a sequence of k copies of a token a,
  every attention row is uniform, whatever Θ_i, so every output row is
  aᵀ Σ_i W_i = aᵀ W_Σ.  The d tokens of :func:`basis_tokens` are linearly
  independent, so their answers give W_Σ by one solve
  (:func:`read_projection`).
* **Distinct tokens reveal the attention, hence linear measurements of Θ.**
  In a sequence of t distinct tokens u_1, …, u_t with multiplicities
  c_1, …, c_t, the output row of a position holding u_ℓ is, for one head,
  y_ℓ = Σ_s q_ℓs u_sᵀ W with q_ℓs = c_s exp(u_ℓᵀ Θ u_s) / Z_ℓ and Σ_s q_ℓs = 1.
  Knowing W, y_ℓ − u_1ᵀW = Σ_{s≥2} q_ℓs (u_s − u_1)ᵀ W is a least-squares
  problem in t − 1 unknowns whose solution is exact when the (u_s − u_1)ᵀ W
  are independent (W invertible and the tokens affinely independent); then
  log(q_ℓs / c_s) − log(q_ℓ1 / c_1) = u_ℓᵀ Θ (u_s − u_1) = ⟨Θ, u_ℓ (u_s − u_1)ᵀ⟩, a linear measurement of Θ
  (:func:`read_logit_measurements`).  Each query gives t(t − 1) of them;
  d² independent ones fix Θ by least squares (:func:`solve_measurements`).

With t = 2 this is the paper's two-token query adapted to our layer (their
regressor reads one query token through a value vector v; ours reads every
row through a d × d projection W, so one two-token query gives two
measurements, one per distinct token).  Random ±1 pairs reach rank d² after
d²/2 queries (:func:`draw_token_sets` checks the rank before anything is
asked).
"""

from __future__ import annotations

import numpy as np

#: Smallest attention share whose logarithm a measurement trusts (see :func:`read_logit_measurements`).
SHARE_FLOOR = 1e-8


def basis_tokens(dim: int) -> np.ndarray:
    """d linearly independent ±1 tokens, shape (d, d): token i is +1 on coordinates ≤ i, −1 after.

    Consecutive tokens differ by 2·e_i and the first has a nonzero first
    coordinate, so the rows are independent for every d (the d × d matrix
    is 2L − 11ᵀ with L the lower-triangular matrix of ones).
    """
    return np.where(np.arange(dim)[None, :] <= np.arange(dim)[:, None], 1.0, -1.0)


def identical_sequences(tokens: np.ndarray, length: int) -> np.ndarray:
    """Sequences of ``length`` copies of each token, shape (n, length, d)."""
    return np.repeat(tokens[:, None, :], length, axis=1)


def read_projection(tokens: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Ŵ_Σ from the answers (n, k, d) to :func:`identical_sequences` of ``tokens`` (n, d), n ≥ d.

    Every row of an answer is tokenᵀ W_Σ; the rows are averaged (under noise
    that divides the variance by k) and W_Σ solved by least squares.
    """
    return np.linalg.lstsq(tokens, answers.mean(axis=1), rcond=None)[0]


def affinely_independent(token_sets: np.ndarray) -> np.ndarray:
    """Whether each set's steps u_s − u_1 (s ≥ 2) are linearly independent, shape (n,) of bool.

    That is what :func:`attention_shares` needs (W invertible), so t ≤ d + 1 tokens can serve.
    """
    steps = token_sets[:, 1:, :] - token_sets[:, :1, :]
    return np.linalg.matrix_rank(steps) == token_sets.shape[1] - 1


def draw_token_sets(count: int, distinct: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` sets of ``distinct`` affinely independent ±1 tokens, shape (count, distinct, dim)."""
    sets = rng.choice(np.array([-1.0, 1.0]), size=(count, distinct, dim))
    dependent = ~affinely_independent(sets)
    while np.any(dependent):
        sets[dependent] = rng.choice(np.array([-1.0, 1.0]), size=(int(dependent.sum()), distinct, dim))
        dependent = ~affinely_independent(sets)
    return sets


def draw_near_sets(count: int, distinct: int, dim: int, flips: int, rng: np.random.Generator) -> np.ndarray:
    """Sets of a random ±1 base token and t − 1 copies of it with ``flips`` random coordinates flipped each.

    The logit gaps u_ℓᵀ Θ (u_s − u_1) of such a set add up ``flips`` entries
    of u_ℓᵀΘ instead of about d/2 for independent tokens, so they stay
    readable where sharp attention leaves an independent pair's smaller
    share below the precision of the answers.
    """
    while True:
        base = rng.choice(np.array([-1.0, 1.0]), size=(count, 1, dim))
        sign = np.ones((count, distinct, dim))
        for index in range(count):
            for token in range(1, distinct):
                sign[index, token, rng.choice(dim, size=flips, replace=False)] = -1.0
        sets = base * sign
        if np.all(affinely_independent(sets)):
            return sets


def spread_sequences(token_sets: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences holding each set's tokens as evenly as ``length`` allows, and the multiplicities.

    Position p holds token p mod t, so the counts differ by at most one
    (with t = 2 and k = 4: a, b, a, b).  Returns the sequences (n, length, d)
    and the counts (t,), the same for every set.
    """
    distinct = token_sets.shape[1]
    slots = np.arange(length) % distinct
    return token_sets[:, slots, :], np.bincount(slots, minlength=distinct).astype(float)


def measurement_matrices(token_sets: np.ndarray) -> np.ndarray:
    """The matrices u_ℓ (u_s − u_1)ᵀ, ℓ = 1…t, s = 2…t, of every set, flattened: shape (n·t·(t−1), d²)."""
    n, t, d = token_sets.shape
    steps = token_sets[:, 1:, :] - token_sets[:, :1, :]
    return np.einsum("nla,nsb->nlsab", token_sets, steps).reshape(n * t * (t - 1), d * d)


def design_rank(token_sets: np.ndarray) -> int:
    """Rank of the measurements the sets give: d² when they fix Θ."""
    return int(np.linalg.matrix_rank(measurement_matrices(token_sets)))


def attention_shares(token_sets: np.ndarray, answers: np.ndarray, projections: np.ndarray) -> np.ndarray:
    """The attention q^i_ℓs each head pays, from each distinct token's rows to each token's copies.

    ``answers`` (n, k, d) answer :func:`spread_sequences` of ``token_sets``
    (n, t, d); ``projections`` (m, d, d) are the heads' W_i.  The rows
    holding the same token are averaged first (they are equal).  Row ℓ's
    answer is y_ℓ = Σ_i Σ_s q^i_ℓs u_sᵀ W_i with Σ_s q^i_ℓs = 1, so

        y_ℓ − u_1ᵀ W_Σ = Σ_i Σ_{s≥2} q^i_ℓs (u_s − u_1)ᵀ W_i,

    m(t − 1) unknowns solved by least squares (exact when those vectors are
    independent, which needs m(t − 1) ≤ d); q^i_ℓ1 = 1 − Σ_{s≥2} q^i_ℓs.
    Returns shape (n, t, m, t): row token ℓ, head i, column token s.
    """
    n, t, d = token_sets.shape
    heads = projections.shape[0]
    length = answers.shape[1]
    slots = np.arange(length) % t
    rows = np.stack([answers[:, slots == slot, :].mean(axis=1) for slot in range(t)], axis=1)  # (n, t, d)
    base = token_sets[:, 0, :] @ projections.sum(axis=0)  # (n, d)
    steps = token_sets[:, 1:, :] - token_sets[:, :1, :]  # (n, t-1, d)
    directions = np.einsum("nsa,iab->nisb", steps, projections).reshape(n, heads * (t - 1), d)
    gram = directions @ directions.transpose(0, 2, 1)
    right = (rows - base[:, None, :]) @ directions.transpose(0, 2, 1)  # (n, t, m(t-1))
    rest = np.linalg.solve(gram, right.transpose(0, 2, 1)).transpose(0, 2, 1).reshape(n, t, heads, t - 1)
    return np.concatenate([1.0 - rest.sum(axis=3, keepdims=True), rest], axis=3)


def read_logit_measurements(token_sets: np.ndarray, counts: np.ndarray, answers: np.ndarray,
                            projections: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The logit differences u_ℓᵀ Θ_i (u_s − u_1) the answers reveal, per head, in
    :func:`measurement_matrices`' order.

    Returns the values and their weights, shape (m, n·t·(t−1)) both (weight
    0 where a share is below :data:`SHARE_FLOOR`), and how
    many shares came out ≤ 0 and were clipped before their logarithm
    (possible only under noise or rounding, when a share is within the error
    of zero).  An error δ in the shares moves log q_s − log q_1 by about
    δ/q_s − δ/q_1, so the weight 1 / (q_s⁻² + q_1⁻²) is the inverse of that
    variance up to a common factor: a share near zero, whose logarithm the
    noise throws far, counts little.  With exact answers the weights change
    nothing (the equations are consistent).
    """
    shares = attention_shares(token_sets, answers, projections).transpose(2, 0, 1, 3)  # (m, n, t, t)
    floor = np.finfo(float).tiny
    clipped = int(np.count_nonzero(shares <= floor))
    shares = np.maximum(shares, floor)
    logs = np.log(shares) - np.log(counts)
    with np.errstate(over="ignore"):
        weights = 1.0 / (shares[..., 1:] ** -2.0 + shares[..., :1] ** -2.0)
    heads = shares.shape[0]
    # A share is read as a difference of outputs of order one, so below SHARE_FLOOR its logarithm has lost
    # more than eight digits: such a measurement is left out (weight 0), not trusted.
    weights = np.where(np.minimum(shares[..., 1:], shares[..., :1]) < SHARE_FLOOR, 0.0, weights)
    return (logs[..., 1:] - logs[..., :1]).reshape(heads, -1), weights.reshape(heads, -1), clipped


def solve_measurements(matrices: np.ndarray, values: np.ndarray,
                       weights: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Θ (d × d) minimising Σ w_r (⟨Θ, M_r⟩ − v_r)² (unit weights by default) and the rank of the measurements."""
    dim = int(round(np.sqrt(matrices.shape[1])))
    if weights is not None:
        root = np.sqrt(weights / weights.max())
        matrices, values = matrices * root[:, None], values * root
    solution, _, rank, _ = np.linalg.lstsq(matrices, values, rcond=None)
    return solution.reshape(dim, dim), int(rank)


def solve_low_rank(matrices: np.ndarray, values: np.ndarray, rank: int, weights: np.ndarray | None = None,
                   max_iter: int = 500) -> tuple[np.ndarray, float]:
    """Θ = U Vᵀ of rank ``rank`` minimising Σ w_r (⟨Θ, M_r⟩ − v_r)², by alternating least squares.

    The compressed-sensing regime of Bhattamishra et al. (a head of rank
    r ≪ d learned from O(rd) queries): Θ has r(2d − r) degrees of freedom, so
    about twice as many measurements fix it where d² would be needed for a
    full Θ.  We solve by alternating minimisation (the paper's recovery
    argument is compressed sensing; this is the standard non-convex
    solver, which needs no semidefinite program): U from the top singular
    vectors of Σ_r v_r M_r (the spectral start), then V given U and U given
    V, each an ordinary least-squares problem in d·r unknowns, until the
    relative misfit stops falling.  Returns Θ and that relative misfit
    (near 0 with exact, consistent measurements).
    """
    count = len(values)
    dim = int(round(np.sqrt(matrices.shape[1])))
    # The spectral start from the unweighted sum: weights spanning decades tilt it towards a few
    # measurements, and the alternation then settles in a wrong basin.
    left = np.linalg.svd((matrices.T @ values).reshape(dim, dim))[0][:, :rank]
    if weights is not None:
        root = np.sqrt(weights / weights.max())
        matrices, values = matrices * root[:, None], values * root
    stacked = matrices.reshape(count, dim, dim)
    scale = float(np.linalg.norm(values)) or 1.0
    misfit, previous = np.inf, np.inf
    for iteration in range(max_iter):
        right = np.linalg.lstsq(np.einsum("nab,ak->nbk", stacked, left).reshape(count, dim * rank), values,
                                rcond=None)[0].reshape(dim, rank)
        left = np.linalg.lstsq(np.einsum("nab,bk->nak", stacked, right).reshape(count, dim * rank), values,
                               rcond=None)[0].reshape(dim, rank)
        misfit = float(np.linalg.norm(matrices @ (left @ right.T).reshape(-1) - values)) / scale
        # Stop at consistency, or once a sweep no longer lowers the misfit (linear convergence has ended).
        if misfit < 1e-15 or (iteration > 20 and misfit > previous * (1 - 1e-6)):
            break
        previous = misfit
    return left @ right.T, misfit


__all__ = ["SHARE_FLOOR", "affinely_independent", "attention_shares", "basis_tokens", "design_rank",
           "draw_near_sets", "draw_token_sets", "identical_sequences", "measurement_matrices",
           "read_logit_measurements", "read_projection", "solve_low_rank", "solve_measurements",
           "spread_sequences"]
