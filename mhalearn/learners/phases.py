"""The phases of the sculpting learner (Chen & Li, *Provably learning a
multi-head attention layer*), as functions shared by :class:`SculptLearner`
and :class:`MomentLearner` (DESIGN.md §4.1).

Every phase function returns its result and a dict of diagnostics that the
learner stores under the phase's key in ``report_``.
"""

from __future__ import annotations

import itertools
import math
import time

import cvxpy as cp
import numpy as np
from scipy.linalg import lstsq
from scipy.optimize import minimize

from .. import kernels
from ..model import MultiHeadAttention, parameter_error
from ._common import lbfgs_refine, solve_projections, span_distance, validation_error


def _relative(estimate: np.ndarray, truth: np.ndarray) -> float:
    return float(np.linalg.norm(estimate - truth) / np.linalg.norm(truth))


# --------------------------------------------------------------- phase 1

def crude_projection_sum(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Phase 1: Ŵ_Σ from near-uniform attention, every output row ≈ x̄ W_Σ.

    Least squares of all output rows of a sequence on its mean token x̄.
    Biased when attention is peaked (expect 20–50 % error), but needs nothing.
    """
    n, k, d = X.shape
    mean_tokens = np.repeat(X.mean(axis=1), k, axis=0)
    return lstsq(mean_tokens, Y.reshape(n * k, d))[0]


# --------------------------------------------------------------- phase 2

def trimmed_projection_sum(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray, *,
                           fraction: float = 0.02, iterations: int = 10) -> np.ndarray:
    """Sharpen Ŵ_Σ on the rows best explained by a single token (trimmed least squares).

    A row on which every head is peaked on token j* equals x_{j*} W_Σ.  Each
    iteration matches every output row to its closest x_j Ŵ_Σ, keeps the
    ``fraction`` of rows with the smallest relative residual and refits Ŵ_Σ
    on them; the share kept shrinks from 20 % to ``fraction``.  It only
    helps when such rows exist (m = 1, or sharp heads), which is why the
    crude estimate cannot be bootstrapped at larger m.
    """
    n, k, d = X.shape
    rows = Y.reshape(n * k, d)
    sample_of_row = np.repeat(np.arange(n), k)
    row_norms = np.linalg.norm(rows, axis=1)
    shares = np.maximum(fraction, 0.2 * 0.6 ** np.arange(iterations))
    for share in shares:
        fitted = X @ w_sum  # (n, k, d): x_j Ŵ_Σ for every token
        residual = np.linalg.norm(fitted[sample_of_row] - rows[:, None, :], axis=-1) / row_norms[:, None]
        best_token = residual.argmin(axis=1)
        keep = np.argsort(residual[np.arange(len(rows)), best_token])[: max(d, int(share * len(rows)))]
        w_sum = lstsq(X[sample_of_row[keep], best_token[keep]], rows[keep])[0]
    return w_sum


def token_equality(X: np.ndarray) -> np.ndarray:
    """(n, k, k) booleans: token j equals token j' in the same sequence."""
    return np.all(X[:, :, None, :] == X[:, None, :, :], axis=-1)


def certify_rows(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray, *, eta: float,
                 residual_tol: float, iterations: int = 300):
    """Decode proxy attention with Ŵ_Σ and keep the rows certified peaked.

    For each query row, â = argmin over the simplex of ‖âᵀ X Ŵ_Σ − y_ℓ‖
    (batched FISTA in :func:`mhalearn.kernels.decode_simplex`).  A row is
    certified when the mass of â on copies of its top token j* is ≥ 1 − η and
    the residual is ≤ ``residual_tol``·‖y_ℓ‖: then every head put its weight
    on j*.  Returns index arrays (sample, row, j*) of the certified rows.
    """
    weights, residuals = kernels.decode_simplex(X @ w_sum, Y, iterations)
    top = weights.argmax(axis=-1)  # (n, k)
    equal = token_equality(X)  # (n, k, k)
    n, k = top.shape
    copies_of_top = np.take_along_axis(equal, top[:, :, None], axis=1)  # (n, k, k): token j == token top[s, ℓ]
    mass = np.sum(weights * copies_of_top, axis=-1)
    row_norms = np.linalg.norm(Y, axis=-1)
    certified = (mass >= 1.0 - eta) & (residuals <= residual_tol * row_norms)
    samples, rows = np.nonzero(certified)
    return samples, rows, top[samples, rows]


def refit_projection_sum(X: np.ndarray, Y: np.ndarray, samples, rows, tops) -> np.ndarray | None:
    """Least squares y_ℓ ≈ x_{j*} W_Σ on certified rows (None if rank-deficient)."""
    tokens = X[samples, tops]
    if tokens.shape[0] < tokens.shape[1] or np.linalg.matrix_rank(tokens) < tokens.shape[1]:
        return None
    return lstsq(tokens, Y[samples, rows])[0]


def certified_fit_residual(X, Y, w_sum, samples, rows, tops) -> float:
    """Median relative residual ‖x_{j*}Ŵ_Σ − y_ℓ‖/‖y_ℓ‖ over certified rows."""
    targets = Y[samples, rows]
    fitted = X[samples, tops] @ w_sum
    return float(np.median(np.linalg.norm(fitted - targets, axis=1) / np.linalg.norm(targets, axis=1)))


def certification_precision(teacher: MultiHeadAttention, X, samples, rows, tops, eta) -> float:
    """Share of certified rows where every teacher head truly puts ≥ 1 − η on j*'s copies."""
    if len(samples) == 0:
        return float("nan")
    weights = teacher.attention(X[samples])  # (c, m, k, k)
    chosen = weights[np.arange(len(samples)), :, rows, :]  # (c, m, k)
    copies = token_equality(X[samples])[np.arange(len(samples)), tops]  # (c, k)
    mass = np.sum(chosen * copies[:, None, :], axis=-1)  # (c, m)
    return float(np.mean(np.all(mass >= 1.0 - eta, axis=1)))


def margin_constraints(X: np.ndarray, samples, rows, tops) -> np.ndarray:
    """Rows vec(x_ℓ (x_{j*} − x_j)ᵀ) of the constraints ⟨Θ, ·⟩ ≥ γ, for x_j ≠ x_{j*}."""
    equal = token_equality(X[samples])[np.arange(len(samples)), tops]  # (c, k)
    queries = X[samples, rows]  # (c, d)
    differences = X[samples, tops][:, None, :] - X[samples]  # (c, k, d)
    keep = ~equal
    pair_sample, pair_token = np.nonzero(keep)
    outer = queries[pair_sample][:, :, None] * differences[pair_sample, pair_token][:, None, :]
    return outer.reshape(len(pair_sample), -1)


# --------------------------------------------------------------- phase 3 & 4 (body)

class ConvexBody:
    """K = {Θ : ⟨C_r, Θ⟩ ≥ γ for every certified constraint r} ∩ {‖Θ‖ ≤ ρ}, in cvxpy.

    Two parameterised problems are compiled once: the minimum-norm point of
    K (a QP) and the maximiser of a linear functional ⟨G, Θ⟩ over K (an LP
    with ``ball="inf"``, an SOCP with ``ball="fro"``), re-solved for each G.
    """

    def __init__(self, constraints: np.ndarray, margin: float, norm_bound: float,
                 ball: str = "fro", solver: str | None = None):
        dim2 = constraints.shape[1]
        self.theta = cp.Variable(dim2)
        self.direction = cp.Parameter(dim2)
        feasible = [constraints @ self.theta >= margin]
        norm = cp.norm(self.theta, 2) if ball == "fro" else cp.norm(self.theta, "inf")
        self.min_norm_problem = cp.Problem(cp.Minimize(cp.sum_squares(self.theta)), feasible)
        self.extreme_problem = cp.Problem(cp.Maximize(self.direction @ self.theta),
                                          feasible + [norm <= norm_bound])
        self.solver = solver or ("CLARABEL" if ball == "fro" else "HIGHS")

    def _solve(self, problem) -> tuple[np.ndarray | None, str]:
        try:
            problem.solve(solver=self.solver)
        except cp.error.SolverError as error:
            return None, f"solver_error: {error}"
        status = problem.status
        if status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or self.theta.value is None:
            return None, status
        return np.array(self.theta.value), status

    def min_norm_point(self) -> tuple[np.ndarray | None, str]:
        return self._solve(self.min_norm_problem)

    def extreme_point(self, direction: np.ndarray) -> tuple[np.ndarray | None, str]:
        self.direction.value = direction
        return self._solve(self.extreme_problem)


def top_directions(stack: np.ndarray, count: int) -> tuple[np.ndarray, list, float]:
    """Top ``count`` right singular vectors of ``stack`` (rows are vec Θ's).

    Returns the basis (count, d²), the singular values and the spectral gap
    σ_count / σ_{count+1} (inf when there is no further direction).
    """
    _, singular, vt = np.linalg.svd(stack, full_matrices=False)
    gap = float(singular[count - 1] / singular[count]) if len(singular) > count and singular[count] > 0 else float("inf")
    return vt[:count], singular.tolist(), gap


def body_span(body: ConvexBody, theta_bar: np.ndarray, heads: int, directions: int,
              rng: np.random.Generator) -> tuple[np.ndarray | None, dict]:
    """Phase 4, body route: maximise random functionals over K, SVD the maximisers.

    K is long along span{Θ_i} and thin across it, so the maximisers
    concentrate near the span.  Measured (m = 1, d = k = 8): the top singular
    directions of the maximisers themselves are about twice as close to the
    span (sin-angle 0.18 vs 0.40) as those of the maximisers minus Θ̄, whose
    spread across a body that is not thin dominates; the uncentred SVD keeps
    the body's mean direction, which lies in the span.
    """
    points, statuses = [], []
    for _ in range(directions):
        point, status = body.extreme_point(rng.standard_normal(theta_bar.size))
        statuses.append(status)
        if point is not None:
            points.append(point)
    info = {"directions": directions, "solved": len(points),
            "statuses": sorted(set(statuses))}
    if len(points) < heads:
        info["failure"] = "too few extreme points solved"
        return None, info
    basis, singular, gap = top_directions(np.vstack(points), heads)
    info.update(singular_values=singular[: heads + 3], spectral_gap=gap)
    return basis, info


# --------------------------------------------------------------- phase 4 (moment)

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


def moment_span(X: np.ndarray, Y: np.ndarray, heads: int, *, max_rows: int = 20000,
                polish_iter: int = 300, rng: np.random.Generator | None = None):
    """Phase 4, moment route: the span of the Θ_i from the logits' first order.

    To first order around uniform attention, y_ℓ − x̄W_Σ = Σ_i x_ℓᵀ Θ_i S W_i
    with S = Σ_j x_j x_jᵀ/k − x̄x̄ᵀ: linear in the cubic features x_ℓ ⊗ S
    with a coefficient tensor that reshapes to Σ_i vec(Θ_i) vec(W_i)ᵀ (rank
    m).  Regress, reshape, SVD; since the features are symmetric in S's two
    indices the regression sees only a symmetrised tensor, so the rank-m
    linearised model is then fitted directly (L-BFGS from the SVD start).
    Returns the orthonormal basis (m, d²), the head estimates P_i (m, d, d)
    and diagnostics.
    """
    n, k, d = X.shape
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
    for start in range(0, n, 512):
        block = slice(start, start + 512)
        cubic = np.einsum("nka,nbc->nkabc", X[block], S[block]).reshape(-1, d ** 3)
        design = np.hstack([np.repeat(mean[block], k, axis=0), cubic])
        gram += design.T @ design
        moment += design.T @ Y[block].reshape(-1, d)
    coefficients = lstsq(gram + 1e-8 * np.trace(gram) / features * np.eye(features), moment)[0]
    w0 = coefficients[:d]
    tensor = coefficients[d:].reshape(d, d, d, d)  # [a, b, c, e] ≈ Σ_i Θ_i[a,b] W_i[c,e]
    u, singular, vt = np.linalg.svd(tensor.reshape(d * d, d * d))
    root = np.sqrt(singular[:heads])
    P = (u[:, :heads] * root).T.reshape(heads, d, d)
    Q = (vt[:heads].T * root).T.reshape(heads, d, d)
    # Polish the rank-m linearised model on its own squared error.
    sizes = (d * d, heads * d * d, heads * d * d)

    def unpack(flat):
        return (flat[: sizes[0]].reshape(d, d), flat[sizes[0]: sizes[0] + sizes[1]].reshape(heads, d, d),
                flat[sizes[0] + sizes[1]:].reshape(heads, d, d))

    def objective(flat):
        w0_, P_, Q_ = unpack(flat)
        prediction, mixed = _linearised_predict(X, mean, S, w0_, P_, Q_)
        residual = (prediction - Y) / n
        d_w0 = mean.T @ residual.sum(axis=1)
        d_Q = np.einsum("nmkd,nke->mde", mixed, residual)
        d_mixed = np.einsum("nke,mde->nmkd", residual, Q_)
        d_queries = d_mixed @ S[:, None]  # S symmetric
        d_P = np.einsum("nkd,nmke->mde", X, d_queries)
        loss = 0.5 * np.sum((prediction - Y) ** 2) / n
        return loss, np.concatenate([d_w0.ravel(), d_P.ravel(), d_Q.ravel()])

    start = np.concatenate([w0.ravel(), P.ravel(), Q.ravel()])
    result = minimize(objective, start, jac=True, method="L-BFGS-B", options={"maxiter": polish_iter})
    _, P, _ = unpack(result.x)
    vectors = P.reshape(heads, -1)
    _, _, vt_span = np.linalg.svd(vectors, full_matrices=False)
    info = {"rows": int(n * k), "features": features, "singular_values": singular[: heads + 3].tolist(),
            "spectral_gap": float(singular[heads - 1] / singular[heads]) if singular[heads] > 0 else float("inf"),
            "linearised_fit": float(result.fun), "polish_iterations": int(result.nit)}
    return vt_span[:heads], P, info


# --------------------------------------------------------------- phase 5

def net_points(dimension: int, radius: float, resolution: float) -> np.ndarray:
    """Grid points of spacing ``resolution`` inside the ball of ``radius`` in R^dimension."""
    steps = int(math.floor(radius / resolution))
    axis = resolution * np.arange(-steps, steps + 1)
    grid = np.stack(np.meshgrid(*([axis] * dimension), indexing="ij"), axis=-1).reshape(-1, dimension)
    return grid[np.linalg.norm(grid, axis=1) <= radius + 1e-12]


def choose_resolution(dimension: int, heads: int, radius: float, max_candidates: int) -> float:
    """Finest resolution (in steps of radius/2^(j/2)) whose m-tuples fit the budget."""
    resolution = radius
    best = radius
    while True:
        count = len(net_points(dimension, radius, resolution))
        if math.comb(count, heads) > max_candidates:
            return best
        best = resolution
        if resolution < radius / 64:
            return best
        resolution /= math.sqrt(2.0)


def candidate_tuples(points: int, heads: int, *, limit: int | None = None,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """Unordered m-tuples of distinct net points (all, or ``limit`` random ones)."""
    total = math.comb(points, heads)
    if limit is None or total <= limit:
        return np.array(list(itertools.combinations(range(points), heads)), dtype=np.int64).reshape(-1, heads)
    draws = np.sort(np.array([rng.choice(points, heads, replace=False) for _ in range(limit)]), axis=1)
    return np.unique(draws, axis=0)


def score_net(X: np.ndarray, Y: np.ndarray, heads_points: np.ndarray, candidates: np.ndarray,
              ridge: float = 1e-8) -> np.ndarray:
    """Relative residual of every candidate tuple, W solved by least squares.

    ``heads_points`` (P, d, d) are the net's attention matrices; features of
    all points are computed once, their pairwise Gram blocks with one BLAS
    product, and each candidate's normal equations are solved in Numba.
    """
    n, k, d = X.shape
    P = heads_points.shape[0]
    features = kernels.head_features(X, heads_points).transpose(0, 2, 1, 3).reshape(n * k, P * d)
    targets = Y.reshape(n * k, d)
    gram = (features.T @ features).reshape(P, d, P, d)
    cross = (features.T @ targets).reshape(P, d, d)
    energy = float(np.sum(targets ** 2))
    reductions = kernels.score_candidates(gram, cross, candidates, ridge * n * k)
    residual = np.where(reductions >= 0, (energy - reductions) / energy, np.inf)
    return np.maximum(residual, 0.0)


def descend_in_span(X, Y, basis: np.ndarray, coefficients: np.ndarray, max_iter: int = 100):
    """Local descent on the span coefficients C (Θ_i = Σ_r C_ir B_r), W by variable projection.

    At the least-squares W the gradient of min_W loss with respect to Θ is
    the partial gradient (envelope theorem), projected onto the basis.
    """
    heads, dim2 = coefficients.shape[0], basis.shape[0]
    d = int(round(math.sqrt(basis.shape[1])))
    B = basis.reshape(dim2, d, d)

    def objective(flat):
        thetas = np.einsum("ir,rab->iab", flat.reshape(heads, dim2), B)
        ws, _ = solve_projections(X, Y, thetas, ridge=1e-10)
        loss, d_thetas, _ = kernels.loss_and_grad(X, Y, thetas, ws)
        return loss, np.einsum("iab,rab->ir", d_thetas, B).ravel()

    result = minimize(objective, coefficients.ravel(), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iter})
    return result.x.reshape(heads, dim2), float(result.fun)


def net_search(X, Y, basis: np.ndarray, heads: int, *, radius: float, resolution: float | None,
               max_candidates: int, score_samples: int, keep: int, search: str,
               rng: np.random.Generator):
    """Phase 5: search the net of coefficient rows in the span, keep the best few.

    Returns a list of (thetas, score) and diagnostics.  ``search="net"``
    scores every unordered m-tuple of net points (cost ~ (net size)^m);
    ``search="multistart"`` scores ``max_candidates`` random tuples and runs
    local descent inside the span from the best ``keep``.
    """
    start = time.perf_counter()
    dim2 = basis.shape[0]
    d = int(round(math.sqrt(basis.shape[1])))
    B = basis.reshape(dim2, d, d)
    if resolution is None:
        resolution = choose_resolution(dim2, heads, radius, max_candidates) if search == "net" else radius / 8
    coefficients = net_points(dim2, radius, resolution)
    coefficients = coefficients[np.linalg.norm(coefficients, axis=1) > 0]  # Θ = 0 is uniform attention
    points = np.einsum("pr,rab->pab", coefficients, B)
    limit = None if search == "net" else max_candidates
    candidates = candidate_tuples(len(points), heads, limit=limit, rng=rng)
    use = rng.permutation(X.shape[0])[:score_samples]
    Xs, Ys = X[use], Y[use]
    scores = score_net(Xs, Ys, points, candidates)
    order = np.argsort(scores)[:keep]
    kept = []
    for index in order:
        chosen = candidates[index]
        if search == "multistart":
            refined, _ = descend_in_span(Xs, Ys, basis, coefficients[chosen])
            thetas = np.einsum("ir,rab->iab", refined, B)
        else:
            thetas = points[chosen]
        kept.append((thetas, float(scores[index])))
    info = {"search": search, "resolution": float(resolution), "radius": float(radius),
            "net_points": int(len(points)), "candidates": int(len(candidates)),
            "score_samples": int(len(use)), "best_scores": [float(scores[i]) for i in order],
            "seconds": time.perf_counter() - start}
    return kept, info


# --------------------------------------------------------------- phase 6

def refine_candidates(X, Y, X_val, Y_val, candidates, *, max_iter: int, tolerance: float = 1e-12):
    """Phase 6: W by least squares, then L-BFGS on all parameters, best by validation.

    Candidates are refined in order of their validation error after the W
    solve; refinement stops once one reaches ``tolerance``.
    """
    entering = []
    for thetas, _ in candidates:
        ws, _ = solve_projections(X, Y, thetas, ridge=1e-10)
        model = MultiHeadAttention(thetas, ws)
        entering.append((validation_error(model, X_val, Y_val), model))
    entering.sort(key=lambda item: item[0])
    best_model, best_val, refined = None, np.inf, []
    for val_before, model in entering:
        polished, history = lbfgs_refine(X, Y, model.thetas, model.ws, max_iter=max_iter,
                                         X_val=X_val, Y_val=Y_val, patience=10)
        val_after = validation_error(polished, X_val, Y_val)
        refined.append({"val_before": val_before, "val_after": val_after,
                        "iterations": history["iterations"]})
        if val_after < best_val:
            best_model, best_val = polished, val_after
        if best_val <= tolerance:
            break
    info = {"val_entering": float(entering[0][0]), "val_leaving": float(best_val),
            "refined": refined}
    return best_model, info


def teacher_phase_errors(report: dict, teacher: MultiHeadAttention | None, **estimates) -> None:
    """Add errors against the planted teacher to ``report`` (no-op without one)."""
    if teacher is None:
        return
    truth_sum = teacher.projection_sum
    for key, value in estimates.items():
        if value is None:
            continue
        if key.endswith("w_sum"):
            report[f"{key}_error"] = _relative(value, truth_sum)
        elif key.endswith("basis") or key == "theta_bar":
            report[f"{key}_distance"] = span_distance(np.atleast_2d(value.reshape(-1, teacher.dim ** 2)), teacher)
        elif key == "model":
            report["parameter_error"] = parameter_error(value, teacher)["total"]
