"""Input laws and labelled datasets drawn from a planted teacher (docs/design.md §1–2)."""

from __future__ import annotations

import numpy as np

from .._validation import as_float_array, as_generator, check_choice, check_instance, check_positive_int, check_real
from .model import MultiHeadAttention

INPUT_LAWS = ("boolean", "gaussian")


def boolean_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs uniform on {±1}^{k×d}: float64 array of shape (samples, length, dim)."""
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    bits = as_generator(rng).integers(0, 2, size=(samples, length, dim), dtype=np.int8)
    return (2.0 * bits - 1.0).astype(np.float64)


def gaussian_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs with i.i.d. standard normal entries, shape (samples, length, dim)."""
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    return as_generator(rng).standard_normal((samples, length, dim))


def draw_inputs(law: str, samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs from the named law (``"boolean"`` or ``"gaussian"``)."""
    check_choice(law, "law", INPUT_LAWS)
    sampler = boolean_inputs if law == "boolean" else gaussian_inputs
    return sampler(samples, length, dim, rng)


def add_label_noise(Y: np.ndarray, noise: float, rng=None) -> np.ndarray:
    """Y plus i.i.d. Gaussian noise of standard deviation ``noise`` (a new array)."""
    noise = check_real(noise, "noise", low=0.0)
    Y = as_float_array(Y, "Y", np.ndim(Y))
    if noise == 0.0:
        return np.array(Y, dtype=np.float64, copy=True)
    return Y + noise * as_generator(rng).standard_normal(np.shape(Y))


def make_dataset(teacher, samples: int, length: int, *, law: str = "boolean",
                 noise: float = 0.0, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``(X, Y)`` with ``Y = teacher(X) + noise·N(0, I)``; ``teacher`` is a :class:`~mhalearn.MultiHeadAttention`."""
    check_instance(teacher, "teacher", MultiHeadAttention, "a MultiHeadAttention")
    rng = as_generator(rng)
    X = draw_inputs(law, samples, length, teacher.dim, rng)
    return X, add_label_noise(teacher.predict(X), noise, rng)
