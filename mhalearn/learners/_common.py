"""Pieces shared by every attention learner: the estimator base class,
variable projection (W given Θ by least squares) and L-BFGS refinement
(docs/design.md §4)."""

from __future__ import annotations

import time

import numpy as np
from scipy.linalg import lstsq
from scipy.optimize import minimize
from sklearn.metrics import r2_score
from threadpoolctl import threadpool_limits

from .._estimator import Estimator, SequenceRegressorMixin, check_fitted
from .._validation import (
    as_generator,
    check_boolean,
    check_enough_samples,
    check_pair,
)
from ..attention import kernels
from ..attention.model import MultiHeadAttention
from ..optim import FlatParameters
from .diagnostics import TeacherDiagnostics
from .report import ZeroLabelsReport


class AttentionLearner(SequenceRegressorMixin, Estimator):
    """Base class: scikit-learn contract for learners of a multi-head attention layer.

    A regressor of sequences: ``predict`` maps X (n, k, d) to F̂(X) (n, k, d),
    ``score`` is R² pooled over every output entry and ``n_features_in_`` is
    the token dimension d (set last in ``fit``: it marks the learner fitted).

    Subclasses declare ``_parameter_constraints`` (checked once, at the start
    of ``fit``) and implement ``_fit(X_train, Y_train, X_val, Y_val, rng,
    diagnostics)`` returning ``(layers, report)``, ``layers`` a dict of
    fitted :class:`MultiHeadAttention` by name (``"model"`` at least).
    ``fit`` validates the data, standardises the units, splits off a
    validation set and stores each layer as ``<name>_`` (``model_``) and
    the report as ``report_``.

    Units: F(cX) with Θ/c² and W/c equals F(X) with Θ and W, and F is linear
    in W, so the learners work on X / s_X and Y / s_Y (s the root mean
    square of the entries) and map the layer back: every tolerance, ridge and
    stopping rule inside is then free of the data's units, and learning c·Y
    gives c times the W.  Boolean inputs have s_X = 1.
    """

    #: Whether the learner needs Boolean inputs unless the user opts out.
    requires_boolean = False
    #: Names of the fitted layers ``_fit`` returns (stored as ``<name>_``).
    _layers = ("model",)

    def fit(self, X, Y, teacher: MultiHeadAttention | None = None, diagnostics: TeacherDiagnostics | None = None):
        """Learn the layer from examples ``X`` → ``Y`` (both of shape (n, k, d)).

        Parameters
        ----------
        X, Y : arrays of shape (n, k, d)
        teacher : MultiHeadAttention, optional
            The planted layer; when given, ``report_`` also holds each
            phase's error against the truth (used only for reporting).
            Short for ``diagnostics=TeacherDiagnostics(teacher)``.
        diagnostics : TeacherDiagnostics, optional
            The hook the phases hand their estimates to for reporting
            (:mod:`mhalearn.learners.diagnostics`); it never changes the fit.

        Returns
        -------
        self
        """
        self._check_params()
        X, Y = check_pair(X, Y)
        if self.requires_boolean and not getattr(self, "allow_non_boolean", False):
            check_boolean(X)
        n, k, d = X.shape
        heads = self.heads
        diagnostics = TeacherDiagnostics.resolve(teacher, diagnostics, heads=heads, dim=d)
        self._check_shape(n, k, d)
        n_val = max(1, int(round(self.validation_fraction * n)))
        if n - n_val < 1:
            raise ValueError(f"X: expected at least 2 sequences (one to fit, one to validate), received {n}")
        check_enough_samples((n - n_val) * k * d, 2 * heads * d * d)
        start = time.perf_counter()
        y_scale, x_scale = _rms(Y), _rms(X)
        if y_scale == 0.0:
            for name in self._layers:
                setattr(self, f"{name}_", MultiHeadAttention(np.zeros((heads, d, d)), np.zeros((heads, d, d))))
            self.report_ = ZeroLabelsReport(total_seconds=time.perf_counter() - start)
            self.n_features_in_ = d
            return self
        X_std, Y_std = X / x_scale, Y / y_scale
        # Label and token bounds for the held-out certificate, in standardised units.
        self.label_bound_ = float(np.sqrt(np.max(np.sum(Y_std ** 2, axis=(1, 2)))))
        self.token_norm_ = float(np.sqrt(np.max(np.sum(X_std ** 2, axis=2))))
        diagnostics = diagnostics.in_units(x_scale, y_scale)
        rng = as_generator(self.random_state)
        order = rng.permutation(n)
        val, train = order[:n_val], order[n_val:]
        # The Numba kernels own the cores.  OpenBLAS threads spin after each
        # small BLAS call and steal them (measured: loss_and_grad 14× slower
        # on a loaded 2-core machine), and the learners' BLAS calls are small.
        with threadpool_limits(limits=1, user_api="blas"):
            layers, report = self._fit(X_std[train], Y_std[train], X_std[val], Y_std[val], rng, diagnostics)
        report["total_seconds"] = time.perf_counter() - start
        report["units"] = {"x_scale": x_scale, "y_scale": y_scale}
        for name, layer in layers.items():
            setattr(self, f"{name}_", MultiHeadAttention(layer.thetas / x_scale ** 2,
                                                         layer.ws * (y_scale / x_scale)))
        self.report_ = report
        self.n_features_in_ = d
        return self

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        """Refuse shapes the learner's maths cannot serve (subclasses add theirs)."""

    def predict(self, X) -> np.ndarray:
        """Outputs of the learned layer, shape (n, k, d)."""
        check_fitted(self)
        return self.model_.predict(X)

    def score(self, X, Y, sample_weight=None) -> float:
        """R², the coefficient of determination, pooled over every output entry.

        R² = 1 − Σ‖F̂(X) − Y‖² / Σ‖Y − Ȳ‖², the sums over every token of every
        sequence and Ȳ the mean output token (:func:`mhalearn._estimator.pooled_r2`
        on the (n·k, d) output tokens, which is scikit-learn's ``r2_score``
        with ``multioutput="variance_weighted"`` for labels of any size);
        ``sample_weight`` (n,) weighs the sequences.  1 is a perfect fit, 0
        the mean token's.  For the relative error Σ‖F̂(X) − Y‖²/Σ‖Y‖² of the
        paper use :func:`mhalearn.relative_error`.
        """
        from .._estimator import pooled_r2

        check_fitted(self)
        X, Y = check_pair(X, Y, self.model_.dim)
        n, k, d = Y.shape
        tokens = Y.reshape(n * k, d)
        if not np.any(tokens != tokens[0]):
            raise ValueError("Y: expected labels that are not all equal (R² is undefined for constant labels), "
                             "received constant labels")
        weights = None if sample_weight is None else np.repeat(np.asarray(sample_weight, dtype=float), k)
        return pooled_r2(tokens, self.model_.predict(X).reshape(n * k, d), weights)


def _rms(array: np.ndarray) -> float:
    """Root mean square of the entries, computed without underflow (0 for an all-zero array)."""
    peak = float(np.max(np.abs(array)))
    if peak == 0.0:
        return 0.0
    return peak * float(np.sqrt(np.mean((array / peak) ** 2)))


class PhaseTimer:
    """Context manager adding a phase's wall time to its report entry."""

    def __init__(self, entry: dict, key: str = "seconds"):
        self.entry, self.key = entry, key

    def __enter__(self):
        self.start = time.perf_counter()
        return self.entry

    def __exit__(self, *exc):
        self.entry[self.key] = self.entry.get(self.key, 0.0) + time.perf_counter() - self.start
        return False


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
