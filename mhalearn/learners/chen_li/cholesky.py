"""The in-place Cholesky factorisation shared by the Numba kernels of phases 2 and 5.

The pattern decoder of phase 2
(:func:`~mhalearn.learners.chen_li.phase2_sculpt.decode_patterns`) and the
candidate scorer of phase 5
(:func:`~mhalearn.learners.chen_li.phase5_net.score_candidates`) factor many
small positive-definite matrices, one per sequence or per candidate.
"""

from __future__ import annotations

import numpy as np
from numba import njit

@njit(inline="always", cache=True)
def cholesky_in_place(matrix, size, floor):
    """Lower Cholesky factor of matrix[:size, :size], in place.

    Returns False when a pivot is ≤ ``floor`` times the largest diagonal
    entry (not positive definite, or numerically singular for floor > 0).
    Shared by the net's candidate scores and the sculpting decoder.
    """
    scale = 0.0
    for a in range(size):
        scale = max(scale, matrix[a, a])
    for j in range(size):
        diagonal = matrix[j, j]
        for t in range(j):
            diagonal -= matrix[j, t] * matrix[j, t]
        if diagonal <= floor * scale:
            return False
        diagonal = np.sqrt(diagonal)
        matrix[j, j] = diagonal
        for r in range(j + 1, size):
            value = matrix[r, j]
            for t in range(j):
                value -= matrix[r, t] * matrix[j, t]
            matrix[r, j] = value / diagonal
    return True
