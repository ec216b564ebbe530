"""The attention layer's Numba kernels under their public name (they live in :mod:`mhalearn.attention.kernels`).

``forward``, ``attention``, ``head_features`` and ``loss_and_grad`` of
F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i, compiled once and cached ([design: kernels]);
``one_thread``, the context in which they (and BLAS) run on the calling
thread alone, as a Dask worker runs them and as their timings are taken.
"""

from ._numba import one_thread
from .attention.kernels import attention, forward, head_features, loss_and_grad

__all__ = ["attention", "forward", "head_features", "loss_and_grad", "one_thread"]
