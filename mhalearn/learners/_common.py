"""Pieces shared by every attention learner: the estimator base class,
variable projection (W given Θ by least squares) and L-BFGS refinement."""

from __future__ import annotations

import time

import numpy as np
from scipy.linalg import lstsq, subspace_angles
from scipy.optimize import minimize
from sklearn.base import BaseEstimator
from threadpoolctl import threadpool_limits

from .. import kernels
from .._validation import (
    as_generator,
    check_boolean,
    check_enough_samples,
    check_pair,
    check_positive_int,
    check_real,
)
from ..model import MultiHeadAttention, parameter_error, relative_error


class AttentionLearner(BaseEstimator):
    """Base class: scikit-learn contract for learners of a multi-head attention layer.

    Subclasses implement ``_fit(X_train, Y_train, X_val, Y_val, rng, teacher)``
    which returns ``(model, report)``.  ``fit`` validates the data once, splits
    off a validation set and stores ``model_`` and ``report_``.
    """

    #: Whether the learner needs Boolean inputs unless the user opts out.
    requires_boolean = False

    def fit(self, X, Y, teacher: MultiHeadAttention | None = None):
        """Learn the layer from examples ``X`` → ``Y`` (both of shape (n, k, d)).

        Parameters
        ----------
        X, Y : arrays of shape (n, k, d)
        teacher : optional planted layer; when given, ``report_`` also holds
            each phase's error against the truth (used only for reporting).

        Returns
        -------
        self
        """
        heads = check_positive_int(self.heads, "heads")
        X, Y = check_pair(X, Y)
        if self.requires_boolean and not getattr(self, "allow_non_boolean", False):
            check_boolean(X)
        n, k, d = X.shape
        if teacher is not None and (teacher.dim != d or teacher.heads != heads):
            raise ValueError(
                f"teacher: expected {heads} heads of dim {d}, received {teacher.heads} heads of dim {teacher.dim}"
            )
        fraction = check_real(self.validation_fraction, "validation_fraction", 0.0, 0.9, low_open=True)
        check_enough_samples(int(round(n * (1 - fraction))) * k * d, 2 * heads * d * d)
        rng = as_generator(self.random_state)
        order = rng.permutation(n)
        n_val = max(1, int(round(fraction * n)))
        val, train = order[:n_val], order[n_val:]
        start = time.perf_counter()
        # The Numba kernels own the cores.  OpenBLAS threads spin after each
        # small BLAS call and steal them (measured: loss_and_grad 14× slower
        # on a loaded 2-core machine), and the learners' BLAS calls are small.
        with threadpool_limits(limits=1, user_api="blas"):
            model, report = self._fit(X[train], Y[train], X[val], Y[val], rng, teacher)
        report["total_seconds"] = time.perf_counter() - start
        self.model_ = model
        self.report_ = report
        return self

    def predict(self, X) -> np.ndarray:
        """Outputs of the learned layer, shape (n, k, d)."""
        self._check_fitted()
        return self.model_.predict(X)

    def score(self, X, Y) -> float:
        """1 − Σ‖F̂(X) − Y‖² / Σ‖Y‖² (1 is perfect)."""
        self._check_fitted()
        X, Y = check_pair(X, Y, self.model_.dim)
        residual = self.model_.predict(X) - Y
        return float(1.0 - np.sum(residual ** 2) / np.sum(Y ** 2))

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            raise ValueError(f"{type(self).__name__}: call fit before predict or score")


# ------------------------------------------------------------ least squares

def solve_projections(X: np.ndarray, Y: np.ndarray, thetas: np.ndarray,
                      ridge: float = 0.0) -> tuple[np.ndarray, float]:
    """W given Θ by least squares (variable projection).

    F(X) = Σ_i (A_i X) W_i is linear in W, so the best W for fixed Θ solves
    one least-squares problem in the per-head features A_i X.  Returns the
    projections (m, d, d) and the residual ½‖F − Y‖²/n.
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
    residual = design @ stacked - targets
    return stacked.reshape(m, d, d), 0.5 * float(np.sum(residual ** 2)) / n


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
    m, d, _ = thetas.shape
    size = m * d * d
    scale = float(np.mean(Y ** 2)) or 1.0  # keeps the objective O(1) for the tolerances

    def objective(flat):
        th = flat[:size].reshape(m, d, d)
        w = flat[size:].reshape(m, d, d)
        loss, dth, dw = kernels.loss_and_grad(X, Y, th, w)
        return loss / scale, np.concatenate([dth.ravel(), dw.ravel()]) / scale

    history = {"train_loss": [], "val_error": []}
    best = {"val": np.inf, "flat": None, "stale": 0}
    iteration = [0]

    def callback(intermediate_result):
        iteration[0] += 1
        history["train_loss"].append(float(intermediate_result.fun) * scale)
        if X_val is None or iteration[0] % check_every:
            return
        flat = intermediate_result.x
        model = MultiHeadAttention(flat[:size].reshape(m, d, d), flat[size:].reshape(m, d, d))
        err = validation_error(model, X_val, Y_val)
        history["val_error"].append(err)
        if err < best["val"] * (1 - 1e-3):
            best.update(val=err, flat=flat.copy(), stale=0)
        else:
            best["stale"] += 1
            if patience and best["stale"] >= patience:
                raise StopIteration

    start = np.concatenate([thetas.ravel(), ws.ravel()])
    result = minimize(objective, start, jac=True, method="L-BFGS-B", callback=callback,
                      options={"maxiter": max_iter, "ftol": 1e-16, "gtol": 1e-12, "maxcor": 30})
    flat = result.x
    model = MultiHeadAttention(flat[:size].reshape(m, d, d), flat[size:].reshape(m, d, d))
    if X_val is not None:
        final_val = validation_error(model, X_val, Y_val)
        if best["flat"] is not None and best["val"] < final_val:
            flat = best["flat"]
            model = MultiHeadAttention(flat[:size].reshape(m, d, d), flat[size:].reshape(m, d, d))
    history.update(iterations=int(result.nit), message=str(result.message),
                   final_train_loss=float(result.fun) * scale)
    return model, history


# ------------------------------------------------------------ teacher metrics

def span_distance(basis: np.ndarray, teacher: MultiHeadAttention) -> float:
    """sin of the largest principal angle between span(basis) and span{vec Θ_i}.

    ``basis`` has shape (r, d, d) or (r, d²); 0 means the spans agree, 1 that
    some teacher direction is orthogonal to the estimate.
    """
    estimate = np.asarray(basis).reshape(len(basis), -1).T
    truth = teacher.thetas.reshape(teacher.heads, -1).T
    angles = subspace_angles(estimate, truth)
    return float(np.sin(np.max(angles)))


def teacher_errors(model: MultiHeadAttention, teacher: MultiHeadAttention | None,
                   X_test: np.ndarray | None = None) -> dict:
    """Head-matched parameter error (and test error when inputs are given)."""
    if teacher is None:
        return {}
    errors = {"parameter_error": parameter_error(model, teacher)["total"]}
    if X_test is not None:
        errors["teacher_test_error"] = relative_error(model, teacher, X_test)
    return errors


def random_parameters(heads: int, dim: int, rng: np.random.Generator,
                      theta_scale: float) -> np.ndarray:
    """Random Θ with i.i.d. Gaussian entries and Frobenius norm ≈ ``theta_scale``."""
    return theta_scale * rng.standard_normal((heads, dim, dim)) / dim
