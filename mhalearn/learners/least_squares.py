"""Least squares and L-BFGS for a multi-head attention layer, below every learner that uses them.

F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i is linear in W, so W given Θ is one least
squares problem (:func:`solve_projections`, variable projection); Chen &
Li's phases solve small normal equations (:func:`least_squares`), and
every learner may polish all parameters by L-BFGS on the Numba gradient
(:func:`lbfgs_refine`).  This module imports the layer's kernels and the
optimiser helpers only ([design: kernels]).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lstsq
from scipy.optimize import minimize

from ..attention import kernels
from ..attention.model import MultiHeadAttention
from ..optim import FlatParameters


def solve_normal(gram: np.ndarray, moment: np.ndarray) -> np.ndarray | None:
    """Least squares from normal equations (None when the d×d Gram matrix is singular).

    The design matrices of the phases have a few thousand rows and d
    columns; the d×d normal equations cost nothing next to an SVD of the
    rows, and the conditioning check keeps them honest.
    """
    eigenvalues = np.linalg.eigvalsh(gram)
    if eigenvalues[0] <= 1e-10 * max(eigenvalues[-1], 1e-300):
        return None
    return np.linalg.solve(gram, moment)


def least_squares(design: np.ndarray, targets: np.ndarray, minimum_rows: int) -> np.ndarray | None:
    """argmin_W ‖design W − targets‖ (None with fewer than ``minimum_rows`` rows or a singular design)."""
    if len(design) < minimum_rows:
        return None
    return solve_normal(design.T @ design, design.T @ targets)


def projections_memory(samples: int, length: int, heads: int, dim: int) -> int:
    """Bytes of the (n·k, m·d) float64 design :func:`solve_projections` builds on ``samples`` sequences:
    the large array of the call, which the memory budget counts (its solver's working copies are
    temporaries of the same size, as the budget's checks leave out; :mod:`mhalearn._memory`)."""
    return 8 * samples * length * heads * dim


def solve_projections(X: np.ndarray, Y: np.ndarray, thetas: np.ndarray, ridge: float = 0.0) -> np.ndarray:
    """W given Θ by least squares (variable projection): the projections, shape (m, d, d).

    F(X) = Σ_i (A_i X) W_i is linear in W, so the best W for fixed Θ solves
    one least-squares problem in the per-head features A_i X.  The loss at
    that W is ``kernels.loss_and_grad(X, Y, thetas, W)[0]`` (not computed
    here: it costs a pass over the data that the learners do not need).
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    design = kernels.head_features(X, thetas).transpose(0, 2, 1, 3).reshape(n * k, m * d)
    targets = Y.reshape(n * k, d)
    if ridge > 0:
        gram = design.T @ design + ridge * n * np.eye(m * d)
        stacked = np.linalg.solve(gram, design.T @ targets)
    else:
        stacked = lstsq(design, targets, lapack_driver="gelsd")[0]
    return stacked.reshape(m, d, d)


def validation_error(model: MultiHeadAttention, X: np.ndarray, Y: np.ndarray) -> float:
    """Relative squared error Σ‖F̂(X) − Y‖² / Σ‖Y‖² on held-out data."""
    return float(np.sum((kernels.forward(X, model.thetas, model.ws) - Y) ** 2) / np.sum(Y ** 2))


def lbfgs_refine(X: np.ndarray, Y: np.ndarray, thetas: np.ndarray, ws: np.ndarray, *,
                 max_iter: int = 2000, X_val: np.ndarray | None = None,
                 Y_val: np.ndarray | None = None, patience: int = 0,
                 check_every: int = 20) -> tuple[MultiHeadAttention, dict]:
    """Polish (Θ, W) by full-batch L-BFGS on ½‖F(X) − Y‖²/n with the Numba gradient.

    With validation data and ``patience > 0``, stops early once the
    validation error has not improved for ``patience`` checks (one check
    every ``check_every`` iterations) and returns the best validated point.
    Returns the model and a history dict.
    """
    layout = FlatParameters(thetas.shape, ws.shape)
    scale = float(np.mean(Y ** 2)) or 1.0  # keeps the objective O(1) for the tolerances

    def objective(flat):
        loss, dth, dw = kernels.loss_and_grad(X, Y, *layout.unpack(flat))
        return loss / scale, layout.pack(dth, dw) / scale

    history = {"train_loss": [], "val_error": []}
    best = {"val": np.inf, "flat": None, "stale": 0}
    iteration = [0]

    def callback(intermediate_result):
        iteration[0] += 1
        history["train_loss"].append(float(intermediate_result.fun) * scale)
        if X_val is None or iteration[0] % check_every:
            return
        flat = intermediate_result.x
        model = MultiHeadAttention(*layout.unpack(flat))
        err = validation_error(model, X_val, Y_val)
        history["val_error"].append(err)
        if err < best["val"] * (1 - 1e-3):
            best.update(val=err, flat=flat.copy(), stale=0)
        else:
            best["stale"] += 1
            if patience and best["stale"] >= patience:
                raise StopIteration

    start = layout.pack(thetas, ws)
    result = minimize(objective, start, jac=True, method="L-BFGS-B", callback=callback,
                      options={"maxiter": max_iter, "ftol": 1e-16, "gtol": 1e-12, "maxcor": 30})
    flat = result.x
    model = MultiHeadAttention(*layout.unpack(flat))
    if X_val is not None:
        final_val = validation_error(model, X_val, Y_val)
        if best["flat"] is not None and best["val"] < final_val:
            model = MultiHeadAttention(*layout.unpack(best["flat"]))
    history.update(iterations=int(result.nit), message=str(result.message),
                   final_train_loss=float(result.fun) * scale)
    return model, history


def random_parameters(heads: int, dim: int, rng: np.random.Generator,
                      theta_scale: float) -> np.ndarray:
    """Random Θ with i.i.d. Gaussian entries and Frobenius norm ≈ ``theta_scale``."""
    return theta_scale * rng.standard_normal((heads, dim, dim)) / dim
