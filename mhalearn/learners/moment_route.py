"""The moment route to span{Θ_i} — ours, not Chen & Li ([design: sculpt]).

To first order around uniform attention, softmax(x_ℓᵀΘX) ≈ 1/k + (centred
logits)/k, so

    y_ℓ − x̄ W_Σ ≈ Σ_i x_ℓᵀ Θ_i S W_i,      S = Σ_j x_j x_jᵀ / k − x̄ x̄ᵀ,

linear in the cubic features x_ℓ ⊗ S with a coefficient tensor that reshapes
to Σ_i vec(Θ_i) vec(W_i)ᵀ, of rank m.  This is the first-order expansion of
softmax, a cousin of the linear-attention regression of Yau et al.; it is
what :class:`~mhalearn.MomentLearner` uses, and what
:class:`~mhalearn.SculptLearner` uses when the body refuses or its own
estimated span error is the lower (:func:`moment_span`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, lstsq, subspace_angles
from scipy.optimize import minimize

from .._memory import check_memory
from ..attention.model import MultiHeadAttention
from ..optim import FlatParameters
from .report import PhaseResult, data_field


@dataclass(frozen=True, kw_only=True)
class MomentSpan(PhaseResult):
    """The moment route's result: span{Θ_i} from the logits' first order (ours, not Chen & Li's).

    ``rows`` output rows were regressed on ``features`` features;
    ``singular_values`` are the coefficient tensor's largest m + 3 and
    ``spectral_gap`` σ_m/σ_{m+1}; ``linearised_fit`` the rank-m linearised
    model's squared error after ``polish_iterations`` of L-BFGS; ``head_norm``
    the largest estimated head norm (it sets the net's radius);
    ``estimated_error`` the parametric-bootstrap estimate of the span's error
    (sin of the largest principal angle; None when not asked for, see
    :func:`moment_span`).  Data: the orthonormal ``basis`` (m, d²), the head
    estimates P_i and the projection estimates Q_i (m, d, d).
    """

    rows: int
    features: int
    singular_values: list
    spectral_gap: float
    linearised_fit: float
    polish_iterations: int
    head_norm: float
    estimated_error: float | None = None
    basis: np.ndarray = data_field()
    estimates: np.ndarray = data_field()
    projections: np.ndarray = data_field()

    columns = ("estimated_error", "spectral_gap", "rows", "linearised_fit")


#: Sequences per block of the moment route's normal equations.
_BLOCK = 512


def moment_memory(length: int, dim: int) -> int:
    """Bytes the moment route holds at once at token dimension d: its features grow like d³.

    The (d + d³)² Gram matrix, the solve's copy of it (its Cholesky factor) and one
    block of cubic features (512·k rows).
    """
    features = dim + dim ** 3
    return 8 * (2 * features * features + _BLOCK * length * features)


def check_moment_memory(length: int, dim: int) -> None:
    """Refuse, before anything is built, a moment route whose memory exceeds the budget, naming d or k."""
    features = dim + dim ** 3
    gram, block = 8 * 2 * features * features, 8 * _BLOCK * length * features
    # Name the size that dominates: the Gram matrix grows with d⁶, the blocks of features with k·d³.
    cause = (f"the moment route at token dimension d = {dim}: the {features:,}² Gram matrix of its "
             f"d + d³ = {features:,} features"
             if gram >= block else
             f"the moment route at sequence length k = {length:,}: blocks of {_BLOCK} sequences × "
             f"k = {length:,} tokens × {features:,} features (d = {dim})")
    check_memory(gram + block, "X", cause,
                 lower="d, the token dimension" if gram >= block else "k, the sequence length")


def _centred_token_covariance(X: np.ndarray) -> np.ndarray:
    """S_s = Σ_j x_j x_jᵀ / k − x̄ x̄ᵀ per sequence, shape (n, d, d)."""
    n, k, d = X.shape
    mean = X.mean(axis=1)
    return np.einsum("nkd,nke->nde", X, X) / k - mean[:, :, None] * mean[:, None, :]


def _linearised_predict(X, mean, S, w0, P, Q):
    """x̄ W_0 + Σ_i x_ℓᵀ P_i S Q_i for every row, and the intermediates."""
    queries = np.einsum("nkd,mde->nmke", X, P)  # x_ℓᵀ P_i
    mixed = queries @ S[:, None]  # (n, m, k, d): x_ℓᵀ P_i S
    prediction = (mean @ w0)[:, None, :] + np.einsum("nmkd,mde->nke", mixed, Q)
    return prediction, mixed


def _design_blocks(X, mean, S):
    """The regression's design [x̄, x_ℓ ⊗ S], one block of ``_BLOCK`` sequences at a time: (slice, rows)."""
    n, k, d = X.shape
    for start in range(0, n, _BLOCK):
        block = slice(start, start + _BLOCK)
        cubic = np.einsum("nka,nbc->nkabc", X[block], S[block]).reshape(-1, d ** 3)
        yield block, np.hstack([np.repeat(mean[block], k, axis=0), cubic])


def _design_moment(X, mean, S, Y) -> np.ndarray:
    """Σ designᵀ y over all rows, (d + d³, d): the right-hand side of the normal equations."""
    return sum(design.T @ Y[block].reshape(len(design), -1) for block, design in _design_blocks(X, mean, S))


def _rank_m_start(coefficients: np.ndarray, dim: int, heads: int):
    """w₀ and the rank-m SVD start (P, Q) of the regression's coefficients, with the tensor's singular values."""
    w0 = coefficients[:dim]
    tensor = coefficients[dim:].reshape(dim, dim, dim, dim)  # [a, b, c, e] ≈ Σ_i Θ_i[a,b] W_i[c,e]
    u, singular, vt = np.linalg.svd(tensor.reshape(dim * dim, dim * dim))
    root = np.sqrt(singular[:heads])
    P = (u[:, :heads] * root).T.reshape(heads, dim, dim)
    Q = (vt[:heads].T * root).T.reshape(heads, dim, dim)
    return w0, P, Q, singular


def _polish(X, mean, S, Y, start, layout, maxiter: int):
    """L-BFGS on the rank-m linearised model's squared error ½ Σ ‖ŷ − y‖² / n from ``start``; its result."""
    n = X.shape[0]

    def objective(flat):
        w0_, P_, Q_ = layout.unpack(flat)
        prediction, mixed = _linearised_predict(X, mean, S, w0_, P_, Q_)
        residual = (prediction - Y) / n
        d_w0 = mean.T @ residual.sum(axis=1)
        d_Q = np.einsum("nmkd,nke->mde", mixed, residual)
        d_mixed = np.einsum("nke,mde->nmkd", residual, Q_)
        d_queries = d_mixed @ S[:, None]  # S symmetric
        d_P = np.einsum("nkd,nmke->mde", X, d_queries)
        loss = 0.5 * np.sum((prediction - Y) ** 2) / n
        return loss, layout.pack(d_w0, d_P, d_Q)

    return minimize(objective, start, jac=True, method="L-BFGS-B", options={"maxiter": maxiter})


def _span_of(P: np.ndarray) -> np.ndarray:
    """Orthonormal basis (m, d²) of span{P_i}."""
    return np.linalg.svd(P.reshape(len(P), -1), full_matrices=False)[2]


def sine_distance(basis: np.ndarray, other: np.ndarray) -> float:
    """sin of the largest principal angle between the spans of two matrices' rows (any bases).

    Between spans of one dimension it is ‖P − P′‖₂ (P, P′ the orthogonal
    projections), a metric: it obeys the triangle inequality.
    """
    return float(np.sin(np.max(subspace_angles(basis.T, other.T))))


def moment_span(X: np.ndarray, Y: np.ndarray, heads: int, *, max_rows: int = 20000,
                polish_iter: int = 300, estimate_error: bool = True,
                rng: np.random.Generator | None = None) -> MomentSpan:
    """The moment route to the span of the Θ_i, from the logits' first order (ours).

    To first order around uniform attention, y_ℓ − x̄W_Σ = Σ_i x_ℓᵀ Θ_i S W_i
    with S = Σ_j x_j x_jᵀ/k − x̄x̄ᵀ: linear in the cubic features x_ℓ ⊗ S
    with a coefficient tensor that reshapes to Σ_i vec(Θ_i) vec(W_i)ᵀ (rank
    m).  Regress (ridge 10⁻⁸ of the Gram matrix's mean diagonal, by
    Cholesky), reshape, SVD; since the features are symmetric in S's two
    indices the regression sees only a symmetrised tensor, so the rank-m
    linearised model is then fitted directly (L-BFGS from the SVD start).
    At most ``max_rows`` output rows (``max_rows // k`` sequences drawn with
    ``rng``) are used.

    With ``estimate_error`` the span's error is estimated from the data by
    a parametric bootstrap through the softmax: labels ỹ = F̃(X) of the
    fitted heads F̃ = Σ_i softmax(X P_i Xᵀ) X Q_i on the same sequences go
    through the same regression, SVD start and polish, and
    ``estimated_error`` is the sine distance between the span they give and
    span{P_i}.  The route's error is mostly the linearisation's bias, which
    resampling the data cannot see (a bootstrap of the polish spreads by
    0.04 where the span is 0.08–0.1 off, at m = 2, d = 10–12, 2·10⁴ rows);
    a layer near the fitted one has nearly the same bias.  The replicate
    reuses the Gram matrix's factor, so it costs one pass over the design and a
    polish.  Its labels carry no noise: label noise's share of the error is
    left out.
    """
    began = time.perf_counter()
    n, k, d = X.shape
    check_moment_memory(k, d)
    rng = np.random.default_rng(0) if rng is None else rng
    use = rng.permutation(n)[: max(1, max_rows // k)]
    X, Y = X[use], Y[use]
    n = X.shape[0]
    mean = X.mean(axis=1)
    S = _centred_token_covariance(X)
    # Linear regression on [x̄, x_ℓ ⊗ S] via accumulated normal equations.
    features = d + d ** 3
    gram = np.zeros((features, features))
    moment = np.zeros((features, d))
    for block, design in _design_blocks(X, mean, S):
        gram += design.T @ design
        moment += design.T @ Y[block].reshape(-1, d)
    gram[np.diag_indices(features)] += 1e-8 * np.trace(gram) / features
    try:
        factor = cho_factor(gram)
        solve = lambda right_hand_side: cho_solve(factor, right_hand_side)  # noqa: E731
    except LinAlgError:  # rounding made the ridged Gram matrix indefinite (a handful of rows)
        solve = lambda right_hand_side: lstsq(gram, right_hand_side)[0]  # noqa: E731
    layout = FlatParameters((d, d), (heads, d, d), (heads, d, d))

    def fit_rank_m(right_hand_side, labels):
        w0, P, Q, singular = _rank_m_start(solve(right_hand_side), d, heads)
        # Polish the rank-m linearised model on its own squared error.
        result = _polish(X, mean, S, labels, layout.pack(w0, P, Q), layout, polish_iter)
        _, P, Q = layout.unpack(result.x)
        return P, Q, singular, result

    P, Q, singular, result = fit_rank_m(moment, Y)
    basis = _span_of(P)
    estimate = None
    if estimate_error:
        simulated = MultiHeadAttention(P, Q).predict(X)
        replicate = fit_rank_m(_design_moment(X, mean, S, simulated), simulated)[0]
        estimate = sine_distance(_span_of(replicate), basis)
    vectors = P.reshape(heads, -1)
    gap = float(singular[heads - 1] / singular[heads]) if len(singular) > heads and singular[heads] > 0 else np.inf
    return MomentSpan(seconds=time.perf_counter() - began, rows=int(n * k), features=features,
                      singular_values=singular[: heads + 3].tolist(), spectral_gap=gap,
                      linearised_fit=float(result.fun), polish_iterations=int(result.nit),
                      head_norm=float(np.max(np.linalg.norm(vectors, axis=1))), estimated_error=estimate,
                      basis=basis, estimates=P, projections=Q)
