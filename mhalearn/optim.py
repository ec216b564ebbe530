"""The optimisers' shared pieces: one Adam(W) step and one flat-parameter view ([design: learners]).

* :class:`AdamW` — Adam (Kingma & Ba, "Adam: a method for stochastic
  optimization", ICLR 2015) with decoupled weight decay (Loshchilov & Hutter,
  "Decoupled weight decay regularization", ICLR 2019) over a dict of arrays.
  The GradientLearner's mini-batch Adam (``weight_decay=0``) and the
  sparse-variables students' AdamW both step through it; their loops (epochs
  with early stopping, a cosine schedule over a step budget) stay with them.
* :class:`FlatParameters` — the packing of several arrays into the one flat
  vector that ``scipy.optimize.minimize`` works on, and back (the L-BFGS
  refinement of (Θ, W), the moment route's polish of (w₀, P, Q)).
"""

from __future__ import annotations

import math

import numpy as np


class AdamW:
    """Adam with decoupled weight decay, updating a dict of arrays in place.

    At step t (from 1), with gradient g of each array θ,

        m ← β₁m + (1−β₁)g,   v ← β₂v + (1−β₂)g²,
        θ ← θ·(1 − η λ·[θ decayed]) − η (m/(1−β₁ᵗ)) / (√(v/(1−β₂ᵗ)) + ε),

    η the step's learning rate (the caller's schedule) and λ the weight decay,
    applied only to the arrays named in ``decayed``.  With λ = 0 this is Adam.

    Parameters
    ----------
    parameters : dict of name → float64 array
        Updated in place by :meth:`step`.
    beta1, beta2, eps : float
        Adam's moment decay rates and the denominator's floor.
    weight_decay : float
        λ ≥ 0.
    decayed : iterable of str
        Names of the arrays under weight decay (usually all but the biases).
    """

    def __init__(self, parameters: dict, *, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0, decayed=()):
        self.parameters = parameters
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.weight_decay = weight_decay
        self.decayed = frozenset(decayed)
        unknown = self.decayed - set(parameters)
        if unknown:
            raise ValueError(f"decayed: expected names of parameters ({sorted(parameters)}), "
                             f"received {sorted(unknown)}")
        self.first = {name: np.zeros_like(value) for name, value in parameters.items()}
        self.second = {name: np.zeros_like(value) for name, value in parameters.items()}
        self.steps = 0

    def step(self, grads: dict, learning_rate: float) -> None:
        """Apply one update with gradients ``grads`` (a dict like ``parameters``) and step size η."""
        beta1, beta2 = self.beta1, self.beta2
        self.steps += 1
        correction1, correction2 = 1.0 - beta1 ** self.steps, 1.0 - beta2 ** self.steps
        for name, value in self.parameters.items():
            g = grads[name]
            self.first[name] = beta1 * self.first[name] + (1.0 - beta1) * g
            self.second[name] = beta2 * self.second[name] + (1.0 - beta2) * g * g
            if self.weight_decay and name in self.decayed:
                value *= 1.0 - learning_rate * self.weight_decay
            value -= learning_rate * (self.first[name] / correction1) / (
                np.sqrt(self.second[name] / correction2) + self.eps)


class FlatParameters:
    """Several arrays of fixed shapes as one flat vector, for optimisers that take one (L-BFGS).

    >>> flat = FlatParameters((2, 3, 3), (2, 3, 3))
    >>> thetas, ws = flat.unpack(flat.pack(np.ones((2, 3, 3)), np.zeros((2, 3, 3))))
    """

    def __init__(self, *shapes: tuple[int, ...]):
        self.shapes = tuple(tuple(int(n) for n in shape) for shape in shapes)
        sizes = [math.prod(shape) for shape in self.shapes]
        self.bounds = np.cumsum([0] + sizes)
        self.size = int(self.bounds[-1])

    def pack(self, *arrays) -> np.ndarray:
        """The arrays (in the order of the shapes) as one new float64 vector."""
        if len(arrays) != len(self.shapes):
            raise ValueError(f"arrays: expected {len(self.shapes)} arrays, received {len(arrays)}")
        for index, (array, shape) in enumerate(zip(arrays, self.shapes)):
            if np.shape(array) != shape:
                raise ValueError(f"arrays[{index}]: expected shape {shape}, received {np.shape(array)}")
        return np.concatenate([np.ravel(array) for array in arrays]).astype(np.float64, copy=False)

    def unpack(self, flat: np.ndarray) -> tuple[np.ndarray, ...]:
        """The arrays of a flat vector, as views reshaped to their shapes."""
        if np.shape(flat) != (self.size,):
            raise ValueError(f"flat: expected shape ({self.size},), received {np.shape(flat)}")
        return tuple(flat[start:stop].reshape(shape)
                     for start, stop, shape in zip(self.bounds[:-1], self.bounds[1:], self.shapes))


__all__ = ["AdamW", "FlatParameters"]
