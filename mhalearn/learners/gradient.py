"""GradientLearner: what a practitioner would do ([design: baselines])."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .._estimator import store_parameters
from .._validation import Integer, Options, Real, Seed
from ..attention import kernels
from ..attention.model import MultiHeadAttention
from ..data.fit_data import FitData
from ..optim import AdamW
from .base import AttentionLearner, FitResult
from .least_squares import lbfgs_refine, random_parameters, solve_projections, validation_error
from .registry import register_learner
from .report import LearnerReport, Notifier, Phase, PhaseResult, data_field, format_value


@dataclass(frozen=True, kw_only=True)
class Restart(PhaseResult):
    """One run of gradient descent from a random start: its validation error and iterations.

    ``val_history`` holds the validation error at every check; data: the layer reached.
    """

    restart: int
    val_error: float
    iterations: int | None
    val_history: list
    model: MultiHeadAttention = data_field()

    columns = ("restart", "val_error", "iterations")


@dataclass(frozen=True, kw_only=True)
class GradientReport(LearnerReport):
    """``report_`` of :class:`GradientLearner`: one :class:`Restart` per random start, and the one kept."""

    method: str
    runs: tuple
    kept: int
    val_error: float

    def phases(self):
        return [(Phase.RESTART, run) for run in self.runs]

    def footer(self) -> list[str]:
        return [f"{self.method}: kept restart {self.kept}, validation error {format_value(self.val_error)}"]


@register_learner("gradient")
class GradientLearner(AttentionLearner):
    """Random initialisation and gradient descent on the squared loss.

    Minimises ½‖F(X) − Y‖²/n over (Θ, W) with the Numba gradient, either by
    full-batch L-BFGS (SciPy) or by mini-batch Adam, from ``restarts``
    random starts; each run stops early when the validation error stalls, and
    the run with the lowest validation error is kept.

    Parameters
    ----------
    heads : int
        Number of heads m.
    method : {"lbfgs", "adam"}
        Optimiser.  L-BFGS reaches machine-precision fits on noiseless data;
        Adam is the stochastic method practitioners use at scale.
    restarts : int
        Independent random starts; the cost grows linearly.
    max_iter : int
        L-BFGS iterations, or Adam epochs, per restart.
    init_scale : float
        Frobenius norm of the random initial Θ_i (W starts at the least
        squares solution given Θ).
    learning_rate, batch_size : Adam step size and mini-batch size.
    validation_fraction : float
        Share of examples held out for early stopping and restart selection.
    patience : int
        Validation checks without improvement before a run stops (0: never).
    random_state : None, int or Generator
        Seeds the split and the initialisations.
    """

    _parameter_constraints = {
        "heads": [Integer(1)],
        "method": [Options("lbfgs", "adam")],
        "restarts": [Integer(1)],
        "max_iter": [Integer(1)],
        "init_scale": [Real(0.0, low_open=True)],
        "learning_rate": [Real(0.0, low_open=True)],
        "batch_size": [Integer(1)],
        "validation_fraction": [Real(0.0, 0.9, low_open=True)],
        "patience": [Integer(0)],
        "random_state": [Seed()],
    }

    def __init__(self, heads: int, *, method: str = "lbfgs", restarts: int = 1,
                 max_iter: int = 3000, init_scale: float = 1.0, learning_rate: float = 0.01,
                 batch_size: int = 64, validation_fraction: float = 0.2, patience: int = 20,
                 random_state=None):
        store_parameters(self, locals())

    _report_class = GradientReport

    def _fit(self, data: FitData, rng: np.random.Generator, notify: Notifier) -> FitResult:
        X, Y, X_val, Y_val = data.X_train, data.Y_train, data.X_val, data.Y_val
        runs = []
        for restart in range(self.restarts):
            start = time.perf_counter()
            thetas = random_parameters(self.heads, X.shape[2], rng, self.init_scale)
            ws = solve_projections(X, Y, thetas)
            if self.method == "lbfgs":
                model, history = lbfgs_refine(X, Y, thetas, ws, max_iter=self.max_iter, X_val=X_val,
                                              Y_val=Y_val, patience=self.patience)
            else:
                model, history = adam_descent(X, Y, thetas, ws, rng, epochs=self.max_iter,
                                              learning_rate=self.learning_rate, batch_size=self.batch_size,
                                              X_val=X_val, Y_val=Y_val, patience=self.patience)
            run = Restart(seconds=time.perf_counter() - start, restart=restart,
                          val_error=validation_error(model, X_val, Y_val), iterations=history.get("iterations"),
                          val_history=history["val_error"], model=model)
            notify(Phase.RESTART, run)
            runs.append(run)
        kept = min(runs, key=lambda run: run.val_error)
        return FitResult({"model": kept.model}, {"method": self.method, "runs": tuple(runs), "kept": kept.restart,
                                                 "val_error": kept.val_error})


def adam_descent(X, Y, thetas, ws, rng, *, epochs: int, learning_rate: float, batch_size: int,
                 X_val, Y_val, patience: int, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-12) -> tuple[MultiHeadAttention, dict]:
    """Mini-batch Adam (Kingma & Ba, :class:`mhalearn.optim.AdamW` without decay) on ½‖F − Y‖²/n,
    validated once per epoch; returns the best validated layer and a history dict."""
    params = {"thetas": thetas.copy(), "ws": ws.copy()}
    adam = AdamW(params, beta1=beta1, beta2=beta2, eps=eps)
    n = X.shape[0]
    best_val, best_params, stale = np.inf, {name: value.copy() for name, value in params.items()}, 0
    history = {"val_error": []}
    for epoch in range(epochs):
        order = rng.permutation(n)
        for begin in range(0, n, batch_size):
            batch = order[begin:begin + batch_size]
            _, dth, dw = kernels.loss_and_grad(X[batch], Y[batch], params["thetas"], params["ws"])
            adam.step({"thetas": dth, "ws": dw}, learning_rate)
        val = validation_error(MultiHeadAttention(params["thetas"], params["ws"]), X_val, Y_val)
        history["val_error"].append(val)
        if val < best_val * (1 - 1e-3):
            best_val, best_params, stale = val, {name: value.copy() for name, value in params.items()}, 0
        else:
            stale += 1
            if patience and stale >= patience:
                break
    history["iterations"] = epoch + 1
    return MultiHeadAttention(best_params["thetas"], best_params["ws"]), history
