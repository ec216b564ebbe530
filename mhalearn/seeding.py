"""Random generators named by their keys, the same in every process and on every machine.

This module imports NumPy only, so the study packages can seed their streams
without importing any solver.
"""

from __future__ import annotations

import numbers
import zlib

import numpy as np


def seeded_rng(*keys) -> np.random.Generator:
    """A generator seeded by ``keys``: non-negative integers, and strings (by their CRC-32).

    ``seeded_rng(seed, "random", m)`` is ``numpy.random.default_rng([seed,
    crc32(b"random"), m])``: independent streams for different keys, the same
    stream for the same keys in every process (Python's ``hash`` of a string
    changes between processes, CRC-32 does not).
    """
    entropy = []
    for key in keys:
        if isinstance(key, str):
            entropy.append(zlib.crc32(key.encode()))
        elif isinstance(key, numbers.Integral) and not isinstance(key, bool) and key >= 0:
            entropy.append(int(key))
        else:
            raise ValueError(f"keys: expected non-negative integers or strings, received {key!r}")
    return np.random.default_rng(entropy)


def draw_seed(rng: np.random.Generator) -> int:
    """One non-negative integer from ``rng``, to seed per-block streams ``default_rng([seed, block])``.

    A pass over blocks draws one seed on the caller; block ``b`` then draws
    from ``default_rng([seed, b])``, so its numbers do not depend on which
    worker runs it nor in which order.
    """
    return int(rng.integers(0, np.iinfo(np.int64).max))


__all__ = ["draw_seed", "seeded_rng"]
