"""Inputs and target functions of the random-feature attention setting ([design: random-features]).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

An example is a sequence ``x_{0:N}`` of shape (N+1, d): row 0 is the query
``x_0`` and rows 1..N are the keys.  Tokens are i.i.d., either uniform on the
sphere of radius √d (``law="sphere"``) or uniform on the cube {±1}^d
(``law="boolean"``); under both laws E[x xᵀ] = I and ‖x‖² = d, so
z_j = ⟨x_0, x_j⟩/√d has mean 0 and variance 1.

Targets (β a fixed unit vector, so ⟨β, x_j⟩ has variance 1):

============================  ==========================================================
name                          f(x_{0:N})
============================  ==========================================================
``mean-linear``               (1/N) Σ_j ⟨β, x_j⟩
``mean-power-1``              (1/N) Σ_j z_j
``mean-power-2``              (1/N) Σ_j (z_j² − 1)
``mean-power-3``              (1/N) Σ_j z_j³
``correlation-relu``          (1/N) Σ_j ReLU(z_j) ⟨β, x_j⟩
``correlation-tanh``          (1/N) Σ_j tanh(z_j) ⟨β, x_j⟩
``single-key``                ⟨β, x_1⟩  (control: not invariant to permuting the keys)
============================  ==========================================================

The intercept is handled in the target: every target has population mean
exactly 0 under both laws (E z² = 1; odd functions and the correlation
targets vanish in mean under x_0, x_j → −x_0, −x_j), so a learner without an
intercept is not penalised for the constant part.  All targets but
``single-key`` are invariant to permutations of the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._validation import as_generator, check_choice, check_inputs, check_positive_int, check_real
from ..attention.data import add_label_noise, boolean_inputs

SEQUENCE_LAWS = ("sphere", "boolean")


def sphere_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Tokens i.i.d. uniform on the sphere of radius √d, shape (samples, length, dim)."""
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    tokens = as_generator(rng).standard_normal((samples, length, dim))
    tokens *= np.sqrt(dim) / np.linalg.norm(tokens, axis=2, keepdims=True)
    return tokens


def sequence_inputs(samples: int, keys: int, dim: int, *, law: str = "sphere", rng=None) -> np.ndarray:
    """Sequences of a query and ``keys`` keys, shape (samples, keys + 1, dim).

    ``law="sphere"``: tokens uniform on the sphere of radius √d;
    ``law="boolean"``: tokens uniform on {±1}^d.
    """
    check_choice(law, "law", SEQUENCE_LAWS)
    keys = check_positive_int(keys, "keys")
    sampler = sphere_inputs if law == "sphere" else boolean_inputs
    return sampler(samples, keys + 1, dim, rng)


def _correlations(X: np.ndarray) -> np.ndarray:
    """z_j = ⟨x_0, x_j⟩/√d for j = 1..N, shape (n, N)."""
    return np.einsum("nd,njd->nj", X[:, 0, :], X[:, 1:, :]) / np.sqrt(X.shape[2])


def _mean_linear(X, beta):
    return (X[:, 1:, :] @ beta).mean(axis=1)


def _mean_power(power: int) -> Callable:
    # E z^p under both laws: 0 for odd p, 1 for p = 2.
    centre = 1.0 if power == 2 else 0.0

    def target(X, beta):
        return (_correlations(X) ** power).mean(axis=1) - centre
    return target


def _correlation_weighted(psi: Callable) -> Callable:
    def target(X, beta):
        return (psi(_correlations(X)) * (X[:, 1:, :] @ beta)).mean(axis=1)
    return target


def _single_key(X, beta):
    return X[:, 1, :] @ beta


_TARGET_FUNCTIONS: dict[str, Callable] = {
    "mean-linear": _mean_linear,
    "mean-power-1": _mean_power(1),
    "mean-power-2": _mean_power(2),
    "mean-power-3": _mean_power(3),
    "correlation-relu": _correlation_weighted(lambda z: np.maximum(z, 0.0)),
    "correlation-tanh": _correlation_weighted(np.tanh),
    "single-key": _single_key,
}

#: Names of the targets, in the order experiments and figures list them.
RANDOM_FEATURE_TARGETS = tuple(_TARGET_FUNCTIONS)

#: The permutation-invariant targets (all but the ``single-key`` control).
INVARIANT_TARGETS = tuple(name for name in RANDOM_FEATURE_TARGETS if name != "single-key")


@dataclass(frozen=True, eq=False)
class RandomFeatureTarget:
    """A named target function of a query-and-keys sequence.

    Attributes
    ----------
    name : one of :data:`RANDOM_FEATURE_TARGETS`.
    beta : unit vector β of shape (d,) used by the linear and correlation
        targets (ignored by the ``mean-power-p`` targets).

    Calling the target on ``X`` of shape (n, N+1, d) returns ``f(X)`` of shape
    (n,); see the module docstring for the formulas.
    """

    name: str
    beta: np.ndarray

    @property
    def dim(self) -> int:
        return self.beta.shape[0]

    @property
    def invariant(self) -> bool:
        """Whether the target is invariant to permutations of the keys."""
        return self.name in INVARIANT_TARGETS

    def __call__(self, X) -> np.ndarray:
        X = check_inputs(X, self.dim)
        if X.shape[1] < 2:
            raise ValueError(f"X: expected a query and at least one key, shape (samples, N+1, dim) "
                             f"with N >= 1, received shape {X.shape}")
        return _TARGET_FUNCTIONS[self.name](X, self.beta)


def make_random_feature_target(name: str, dim: int, rng=None) -> RandomFeatureTarget:
    """The named target on tokens of dimension ``dim``, with β uniform on the unit sphere."""
    check_choice(name, "name", RANDOM_FEATURE_TARGETS)
    dim = check_positive_int(dim, "dim")
    beta = as_generator(rng).standard_normal(dim)
    return RandomFeatureTarget(name, beta / np.linalg.norm(beta))


def make_sequence_dataset(target: RandomFeatureTarget, samples: int, keys: int, *,
                          law: str = "sphere", noise: float = 0.0, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``(X, y)`` with ``X`` of shape (samples, keys + 1, d) and ``y = f(X) + noise·N(0, 1)``."""
    if not isinstance(target, RandomFeatureTarget):
        raise ValueError(f"target: expected a RandomFeatureTarget, received {type(target).__name__}")
    check_real(noise, "noise", low=0.0)
    rng = as_generator(rng)
    X = sequence_inputs(samples, keys, target.dim, law=law, rng=rng)
    return X, add_label_noise(target(X), noise, rng)
