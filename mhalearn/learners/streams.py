"""Examples as a stream of blocks, so the sculpting phases run in bounded memory.

The phases of :class:`~mhalearn.SculptLearner` pass over the examples
several times (decode every row, keep the agreement rows, refit, decode
again).  They read the examples through a *source*: an object with
``samples``, ``length``, ``dim`` and ``blocks()``, which yields ``(X, Y)``
blocks of at most ``block_size`` sequences in the same order on every pass.
:class:`ArraySource` wraps arrays already in memory; :class:`TeacherSource`
draws the blocks from a planted teacher on every pass (deterministically, from
one seed per block), so an experiment can use 10⁶ sequences while holding one
block at a time.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .._validation import check_positive_int

#: Sequences per block: about 25 MB of float64 inputs and labels at d = 12, k = 4.
BLOCK_SIZE = 1 << 16


class ArraySource:
    """Blocks of arrays ``X``, ``Y`` of shape (n, k, d) held in memory."""

    def __init__(self, X: np.ndarray, Y: np.ndarray, block_size: int = BLOCK_SIZE):
        self.X, self.Y = X, Y
        self.samples, self.length, self.dim = X.shape
        self.block_size = check_positive_int(block_size, "block_size")

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, self.samples, self.block_size):
            stop = start + self.block_size
            yield self.X[start:stop], self.Y[start:stop]

    def head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` sequences (fewer when the source is shorter)."""
        return self.X[:samples], self.Y[:samples]


class TeacherSource:
    """Boolean sequences labelled by a teacher, drawn afresh on every pass.

    Block ``b`` is drawn from ``numpy.random.default_rng([seed, b])``, so
    every pass sees the same examples without storing them; labels may carry
    Gaussian noise of standard deviation ``noise`` (drawn from the same
    stream).
    """

    def __init__(self, teacher, samples: int, length: int, *, seed: int = 0, noise: float = 0.0,
                 block_size: int = BLOCK_SIZE):
        self.teacher = teacher
        self.samples = check_positive_int(samples, "samples")
        self.length = check_positive_int(length, "length")
        self.dim = teacher.dim
        self.seed = check_positive_int(seed, "seed", minimum=0)
        self.noise = float(noise)
        self.block_size = check_positive_int(block_size, "block_size")

    def _block(self, index: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, index])
        X = rng.choice(np.array([-1.0, 1.0]), size=(size, self.length, self.dim))
        Y = self.teacher.predict(X)
        if self.noise > 0:
            Y = Y + self.noise * rng.standard_normal(Y.shape)
        return X, Y

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for index, start in enumerate(range(0, self.samples, self.block_size)):
            yield self._block(index, min(self.block_size, self.samples - start))

    def head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` sequences of the stream, in memory."""
        parts, total = [], 0
        for X, Y in self.blocks():
            parts.append((X, Y))
            total += X.shape[0]
            if total >= samples:
                break
        X = np.concatenate([p[0] for p in parts])[:samples]
        Y = np.concatenate([p[1] for p in parts])[:samples]
        return X, Y
