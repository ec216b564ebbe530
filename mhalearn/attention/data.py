"""Input laws and labelled datasets drawn from a planted teacher (docs/design.md §1–2)."""

from __future__ import annotations

import numpy as np

from .._memory import check_memory
from .._validation import as_float_array, as_generator, check_choice, check_instance, check_positive_int, check_real
from .model import MultiHeadAttention

INPUT_LAWS = ("boolean", "gaussian")


def _check_sequences_memory(bytes_per_entry: int, samples: int, length: int, dim: int, what: str) -> None:
    """The memory budget's check (:mod:`mhalearn._memory`) for arrays of ``samples`` sequences of length × dim."""
    check_memory(bytes_per_entry * samples * length * dim, "samples",
                 f"{samples} {what} of {length} × {dim} entries")


def boolean_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs uniform on {±1}^{k×d}: float64 array of shape (samples, length, dim).

    Raises ``MemoryError`` naming ``samples``, before drawing, when the
    draw (9 bytes per entry: the int8 bits and the inputs) exceeds the
    memory budget (:func:`mhalearn.set_memory_budget`).
    """
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    _check_sequences_memory(9, samples, length, dim, "Boolean sequences")
    bits = as_generator(rng).integers(0, 2, size=(samples, length, dim), dtype=np.int8)
    X = bits.astype(np.float64)
    X *= 2.0  # in place: no float64 temporaries next to X
    X -= 1.0
    return X


def gaussian_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs with i.i.d. standard normal entries, shape (samples, length, dim).

    Raises ``MemoryError`` naming ``samples``, before drawing, when the
    inputs exceed the memory budget (:func:`mhalearn.set_memory_budget`).
    """
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    _check_sequences_memory(8, samples, length, dim, "Gaussian sequences")
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
    """Draw ``(X, Y)`` with ``Y = teacher(X) + noise·N(0, I)``; ``teacher`` is a :class:`~mhalearn.MultiHeadAttention`.

    Raises ``MemoryError`` naming ``samples``, before drawing, when the
    dataset exceeds the memory budget (:func:`mhalearn.set_memory_budget`):
    it holds three float64 arrays of shape (samples, length, dim) at once,
    the inputs, the teacher's outputs and the labels.
    """
    check_instance(teacher, "teacher", MultiHeadAttention, "a MultiHeadAttention")
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    _check_sequences_memory(3 * 8, samples, length, teacher.dim, "labelled sequences")
    rng = as_generator(rng)
    X = draw_inputs(law, samples, length, teacher.dim, rng)
    return X, add_label_noise(teacher.predict(X), noise, rng)
