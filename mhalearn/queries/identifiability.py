"""Distinct parameterisations of one map: why multi-head attention is not identifiable from queries.

Bhattamishra, Shah, Hahn & Kanade, *Provably learning attention with
queries* (arXiv 2601.16873), end by showing that multi-head attention
parameters are not identifiable from value queries in general: distinct
parameterisations induce the same input–output map, so no query learner
can return "the" parameters without structural assumptions.  The pair
built here shows it for our layer.  Two heads with the same attention
matrix Θ act as one head with projection W_a + W_b:

    softmax(XΘXᵀ) X W_a + softmax(XΘXᵀ) X W_b = softmax(XΘXᵀ) X (W_a + W_b),

so moving any D from one head's projection to the other's,
(W_a, W_b) → (W_a + D, W_b − D), changes the parameters and not the map, on
every input, Boolean or real.  The two layers are not related by a
permutation of heads (the symmetry every layer has), so head-matched
parameter errors stay far from zero while the outputs agree to rounding.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_float_array, as_generator, check_instance, check_positive_int
from ..attention.model import MultiHeadAttention
from ..attention.teachers import sample_teacher


def split_head(layer: MultiHeadAttention, head: int, part) -> MultiHeadAttention:
    """The same map with head ``head`` split in two: (Θ, ``part``) and (Θ, W − ``part``), m + 1 heads.

    ``part`` is any d × d matrix; every choice gives the same outputs as ``layer``.
    """
    check_instance(layer, "layer", MultiHeadAttention)
    head = check_positive_int(head, "head", minimum=0)
    if head >= layer.heads:
        raise ValueError(f"head: expected an index below the layer's {layer.heads} heads, received {head}")
    part = as_float_array(part, "part", 2)
    if part.shape != (layer.dim, layer.dim):
        raise ValueError(f"part: expected shape {(layer.dim, layer.dim)}, received {part.shape}")
    thetas = np.concatenate([layer.thetas, layer.thetas[head][None]])
    ws = np.concatenate([layer.ws, (layer.ws[head] - part)[None]])
    ws[head] = part
    return MultiHeadAttention(thetas, ws)


def non_identifiable_pair(heads: int, dim: int, rng=None) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """Two m-head layers (m ≥ 2) with distinct parameters and the same map F.

    A random teacher of m − 1 heads (:func:`~mhalearn.sample_teacher`) has
    its first head split in two by :func:`split_head` twice, with two
    different random parts: both layers have m heads, heads 0 and m − 1
    share Θ, and their projections differ by a random D in head 0 and −D
    in head m − 1.
    """
    heads = check_positive_int(heads, "heads", minimum=2)
    dim = check_positive_int(dim, "dim")
    rng = as_generator(rng)
    base = sample_teacher(heads - 1, dim, rng=rng)
    scale = np.linalg.norm(base.ws[0]) / dim
    first, second = (split_head(base, 0, scale * rng.standard_normal((dim, dim))) for _ in range(2))
    return first, second


__all__ = ["non_identifiable_pair", "split_head"]
