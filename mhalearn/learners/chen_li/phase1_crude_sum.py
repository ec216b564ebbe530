"""Phase 1 of Chen & Li's learner: a crude estimate of W_Σ = Σ_i W_i from the input–label correlation.

Everything the sculpting phases decode depends on Ŵ_Σ: an agreement row is
recognised by y_ℓ ≈ âᵀ X Ŵ_Σ (phase 2).  The crude estimate needs nothing:
under uniform attention every output row equals x̄ W_Σ, x̄ the sequence's
mean token, so regressing every output row on x̄ gives W_Σ exactly there;
peaked attention biases it (expect 20–50 % error), which phase 3 repairs.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from ...data.scratch import ScratchArrays
from ...data.sources import kernel_labels, stream_rows
from ..least_squares import solve_normal
from ..report import PhaseResult, data_field


@dataclass(frozen=True, kw_only=True)
class CrudeSum(PhaseResult):
    """Phase 1's result: Ŵ_Σ (data) from ``sequences`` sequences."""

    sequences: int
    w_sum: np.ndarray = data_field()


def crude_projection_sum(source) -> CrudeSum:
    """Phase 1: Ŵ_Σ by least squares of every output row on its mean token x̄.

    Sums the d×d normal equations Σ k·x̄x̄ᵀ and Σ x̄ (Σ_ℓ y_ℓ)ᵀ of every block
    of the source (:mod:`mhalearn.data.sources`) in block order, one pass.

    Raises ValueError when the mean tokens do not span R^d.
    """
    start = time.perf_counter()
    d = source.dim
    gram, moment = np.zeros((d, d)), np.zeros((d, d))
    # A block's per-sequence sums go into lent arrays: new ones are fresh pages for every block (ScratchArrays).
    for block_gram, block_moment in source.map_blocks(_crude_block_summary, ScratchArrays()):
        gram += block_gram
        moment += block_moment
    w_sum = solve_normal(gram, moment)
    if w_sum is None:
        raise ValueError("X: the mean tokens do not span R^d, so W_Σ cannot be estimated")
    return CrudeSum(seconds=time.perf_counter() - start, sequences=source.samples, w_sum=w_sum)


def _crude_block_summary(X: np.ndarray, Y: np.ndarray, rows: np.ndarray | None,
                         scratch: ScratchArrays) -> tuple[np.ndarray, np.ndarray]:
    """One block's share of phase 1's normal equations over its ``rows``, its per-sequence sums in arrays
    lent by ``scratch``.

    (k·x̄ᵀx̄, x̄ᵀ Σ_ℓ y_ℓ), d × d each.
    """
    labels, label_scale = kernel_labels(Y)
    rows = stream_rows(rows, len(X))
    with scratch.lent((len(rows), X.shape[2]), (len(rows), labels.shape[2])) as (mean, label_sum):
        token_sums(np.ascontiguousarray(X), labels, rows, label_scale, out=(mean, label_sum))
        return X.shape[1] * mean.T @ mean, mean.T @ label_sum


def token_sums(X, Y, rows, label_scale=1.0, out=None) -> tuple[np.ndarray, np.ndarray]:
    """x̄ and Σ_ℓ y_ℓ of the sequences ``rows``, each (len(rows), d), in one sweep; y_ℓ = Y[ℓ] / ``label_scale``;
    into the pair of C-contiguous float64 arrays ``out`` when given.

    NumPy's reductions over the middle axis of (n, k, d) cost five times
    this sweep, which adds each sequence's k rows in order, each sum in a
    register rather than stored and read back in the output at every term,
    and divides by a scale only when it is not 1 (y / 1 is y, to the bit).
    """
    mean, label_sum = (np.empty((len(rows), X.shape[2])), np.empty((len(rows), Y.shape[2]))) if out is None else out
    _token_sums_into(X, Y, rows, float(label_scale), mean, label_sum)
    return mean, label_sum


@njit(cache=True, nogil=True)
def _token_sums_into(X, Y, rows, label_scale, mean, label_sum):
    k, d = X.shape[1], X.shape[2]
    labels = Y.shape[2]
    scaled = label_scale != 1.0
    for out in range(rows.shape[0]):
        tokens, outputs = X[rows[out]], Y[rows[out]]
        for e in range(d):
            total = 0.0
            for j in range(k):
                total += tokens[j, e]
            mean[out, e] = total / k
        for e in range(labels):
            total = 0.0
            for j in range(k):
                total += outputs[j, e] / label_scale if scaled else outputs[j, e]
            label_sum[out, e] = total
