"""Teacher families built to make the number of heads m matter ([design: teacher]).

The ``random`` family's heads are far apart, soft and of comparable weight:
random-start gradient descent recovers them from a few hundred sequences up
to m = 8.  Each family here removes one of those comforts, so that a learner
may need more samples, or fail more often, as m grows:

``near-identical``
    Θ_i = Θ_0 + small own parts (ρ = 0.9 shared, cosine ≈ 0.99 between
    heads), ‖Θ_i‖_F = 2: the heads' attention patterns almost coincide.
``sharp``
    ‖Θ_i‖_F = 16 (``peaked`` has 8): near-one-hot attention, whose softmax
    saturates, so a random start sees almost no gradient on Θ.
``small-margin``
    Sharp *and* near-identical (ρ = 0.8, ‖Θ_i‖_F = 8): the heads' arg-max
    token is the same on most rows; they differ only on rows whose top two
    logits are within a small margin.
``cancelling``
    Our reconstruction of the mechanism behind Chen & Li's worst-case lower
    bound, not their construction (see :func:`cancelling_teacher`): the
    heads' projections alternate in sign, W_i = (−1)^i W_0, and the Θ_i are
    drawn with Σ_i (−1)^i Θ_i = 0, so the layer's mean (x̄ W_Σ, W_Σ ≈ 0 at
    even m ≥ 4) and its first-order term in the logits both vanish and the
    signal lives in higher-order moments — the regime where statistical
    query lower bounds are proved, and outside the non-degeneracy
    conditions (κ(W_Σ) ≤ 20) of Chen & Li's upper bound.  (At m = 2 the two
    cancellations would make the heads equal; m = 2 keeps the first-order
    one: antipodal heads Θ_1 = −Θ_0.)

The ``dominant-head`` family (one W 10× the others) lives in
:mod:`mhalearn.attention.teachers`.  At m = 1 every family is a single head
of its Θ norm: the m = 1 cell is each family's easy baseline.
"""

from __future__ import annotations

import numpy as np

from .model import MultiHeadAttention
from .teachers import TeacherFamily, nondegeneracy, register_family, sample_teacher

#: Shared component ρ and Θ norm of the ``near-identical`` family.
NEAR_IDENTICAL_SHARED = 0.9
NEAR_IDENTICAL_NORM = 2.0
#: Θ norm of the ``sharp`` family.
SHARP_NORM = 16.0
#: Shared component ρ and Θ norm of the ``small-margin`` family.
SMALL_MARGIN_SHARED = 0.8
SMALL_MARGIN_NORM = 8.0
#: Θ norm of the ``saturated`` family, and the random family's, where its dial starts.
SATURATED_NORM = 40.0
RANDOM_NORM = 2.0
#: Mean Θ norm of the ``cancelling`` family, and the share of each W_i that is its own.
CANCELLING_NORM = 2.0
CANCELLING_OWN_W = 0.1
#: The Gram-ratio floor of the near-identical families: heads with a large shared component have a
#: small smallest eigenvalue by construction (≈ (1 − ρ)² / (ρ² m)), which the default floor 0.2 rejects.
SHARED_GRAM_FLOOR = 1e-4


def cancelling_teacher(heads: int, dim: int, rng: np.random.Generator, *, theta_norm: float = CANCELLING_NORM,
                       own_w: float = CANCELLING_OWN_W, hardness: float = 1.0) -> MultiHeadAttention:
    """A layer whose heads cancel in the mean and to first order in the logits (m ≥ 2).

    W_i = (−1)^i W_0 + ``own_w``·G_i (W_0, G_i with N(0, 1/d) entries), and
    Θ_i Gaussian with their alternating sum removed, Θ_i ← Θ_i − (−1)^i S/m
    with S = Σ_j (−1)^j Θ_j, so Σ_i (−1)^i Θ_i = 0 exactly; then all Θ_i are
    scaled by one factor to a mean ‖Θ_i‖_F of ``theta_norm`` (one factor keeps
    the sum zero).  To first order in the logits, F(X) ≈ x̄W_Σ +
    Σ_i x_ℓᵀ Θ_i S_X W_i, and with W_i ≈ ±W_0 both terms vanish up to the
    ``own_w`` parts: what is left to learn is second order and beyond.

    Why this shape: Chen & Li prove their exponential-in-m lower bounds for
    worst-case layers (statistical-query and cryptographic reductions); the
    statistical-query constructions for one-hidden-layer networks that such
    reductions build on are sums of units with alternating signs whose
    low-degree moments cancel.  We did not reconstruct the paper's reduction
    itself (its embedding of a hard function into Θ and W); this family keeps
    the cancellation, which is what starves moment methods and the early,
    nearly linear phase of gradient descent of signal.  It violates
    κ(W_Σ) ≤ 20 (W_Σ ≈ 0 at even m), which Chen & Li's upper bound assumes.

    At m = 1 it is one Gaussian head of norm ``theta_norm`` (there is nothing
    to cancel).  At m = 2 the two cancellations would force Θ_1 = Θ_0 (one
    head counted twice), so m = 2 keeps the first-order one alone: Θ_1 = −Θ_0
    (antipodal heads) with W_1 ≈ W_0, so W_Σ ≈ 2W_0 does not vanish.

    ``hardness`` h ∈ [0, 1] is the family's dial: only the share h of the
    alternating sum is removed, Θ_i ← Θ_i − h·(−1)^i S/m, and each W_i is
    cos(πh/2)·R_i + sin(πh/2)·C_i, with C_i the cancelling projection above
    and R_i an independent random one (N(0, 1/d) entries, drawn last, so h = 1
    is the family's teacher to the bit).  h = 0 is a random teacher (Gaussian
    Θ_i at a mean norm ``theta_norm``, Gaussian W_i, not rejection-sampled),
    h = 1 the lower-bound regime; the non-degeneracy conditions break
    somewhere between, which :func:`~mhalearn.nondegeneracy` tells per teacher.
    """
    return MultiHeadAttention(_cancelling_thetas(heads, dim, rng, theta_norm, hardness),
                              _cancelling_ws(heads, dim, rng, own_w, hardness))


def _cancelling_signs(heads: int) -> np.ndarray:
    # m = 2 keeps the first-order cancellation alone (antipodal Θ, W_1 ≈ W_0): see cancelling_teacher.
    return (-1.0) ** np.arange(heads) if heads != 2 else np.ones(2)


def _cancelling_thetas(heads: int, dim: int, rng: np.random.Generator, theta_norm: float,
                       hardness: float) -> np.ndarray:
    signs = _cancelling_signs(heads)
    thetas = rng.standard_normal((heads, dim, dim))
    if heads > 1:
        alternating = np.einsum("i,ide->de", signs, thetas)
        thetas -= hardness * signs[:, None, None] * alternating[None] / heads
    return thetas * (theta_norm / np.mean(np.linalg.norm(thetas.reshape(heads, -1), axis=1)))


def _cancelling_ws(heads: int, dim: int, rng: np.random.Generator, own_w: float, hardness: float) -> np.ndarray:
    w0 = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    if heads == 1:
        return w0[None]
    own = rng.standard_normal((heads, dim, dim)) / np.sqrt(dim)
    ws = _cancelling_signs(heads)[:, None, None] * w0[None] + own_w * own
    if hardness < 1.0:
        angle = 0.5 * np.pi * hardness
        ws = np.cos(angle) * rng.standard_normal((heads, dim, dim)) / np.sqrt(dim) + np.sin(angle) * ws
    return ws


#: Draws of the W_i a ``cancelling-conditioned`` teacher may take to meet the W conditions.
CONDITIONED_TRIES = 1000


def conditioned_cancelling_teacher(heads: int, dim: int, rng: np.random.Generator, *,
                                   hardness: float = 1.0) -> MultiHeadAttention:
    """:func:`cancelling_teacher` with its W_i redrawn until κ(W_Σ) ≤ 20 and every ‖W_i‖_F/√d ≥ 0.5.

    Gaussian projections alone break κ(W_Σ) ≤ 20 on most draws at d = 12
    (the ``random`` family meets it by rejection), which would put most of
    the dial outside Chen & Li's conditions whatever ``hardness`` is.  Here
    the W side of the conditions holds on every teacher (the Θ_i are drawn
    once, first, so one seed keeps its Θ_i's draws at every point of the
    dial), and the dial moves the one condition the cancellation breaks: the
    heads' Gram ratio, which falls to 0 as ``hardness`` → 1.  The first draw
    is :func:`cancelling_teacher`'s teacher; a seed whose draws never meet
    the W conditions in :data:`CONDITIONED_TRIES` raises ``ValueError``.
    """
    thetas = _cancelling_thetas(heads, dim, rng, CANCELLING_NORM, hardness)
    for _ in range(CONDITIONED_TRIES):
        layer = MultiHeadAttention(thetas, _cancelling_ws(heads, dim, rng, CANCELLING_OWN_W, hardness))
        report = nondegeneracy(layer)
        if report.sum_well_conditioned and report.every_head_matters:
            return layer
    raise ValueError(f"cancelling-conditioned: no W_i with κ(W_Σ) ≤ {report.condition_ceiling:g} in "
                     f"{CONDITIONED_TRIES} draws (heads={heads}, dim={dim}, hardness={hardness:g})")


register_family(TeacherFamily(
    "near-identical",
    f"heads sharing ρ = {NEAR_IDENTICAL_SHARED:g} of Θ (cosine ≈ 0.99 between heads), ‖Θ_i‖_F = "
    f"{NEAR_IDENTICAL_NORM:g}; dial: hardness h shares ρ = {NEAR_IDENTICAL_SHARED:g}·h",
    lambda heads, dim, rng, hardness=1.0: sample_teacher(
        heads, dim, theta_norm=NEAR_IDENTICAL_NORM, shared=hardness * NEAR_IDENTICAL_SHARED,
        gram_floor=SHARED_GRAM_FLOOR, rng=rng),
    dial="hardness"))
register_family(TeacherFamily(
    "sharp", f"near-one-hot attention, ‖Θ_i‖_F = {SHARP_NORM:g}",
    lambda heads, dim, rng: sample_teacher(heads, dim, theta_norm=SHARP_NORM, rng=rng)))
register_family(TeacherFamily(
    "small-margin",
    f"sharp and near-identical heads (ρ = {SMALL_MARGIN_SHARED:g}, ‖Θ_i‖_F = {SMALL_MARGIN_NORM:g}): "
    "their arg-max tokens differ only on rows with small logit margins",
    lambda heads, dim, rng: sample_teacher(heads, dim, theta_norm=SMALL_MARGIN_NORM, shared=SMALL_MARGIN_SHARED,
                                           gram_floor=SHARED_GRAM_FLOOR, rng=rng)))
register_family(TeacherFamily(
    "cancelling",
    "W_i = ±W_0 alternating and Σ(−1)^i Θ_i = 0: the mean and first-order moments cancel "
    "(our reconstruction of the lower-bound regime; violates κ(W_Σ) ≤ 20); dial: hardness",
    cancelling_teacher, dial="hardness"))
register_family(TeacherFamily(
    "cancelling-conditioned",
    "cancelling with κ(W_Σ) ≤ 20 by rejection; dial: hardness h removes the share h of Σ(−1)^i Θ_i "
    "(inside Chen & Li's conditions while the heads' Gram ratio ≥ 0.2)",
    conditioned_cancelling_teacher, dial="hardness"))


def saturated_teacher(heads: int, dim: int, rng: np.random.Generator, *, hardness: float = 1.0) -> MultiHeadAttention:
    """A random teacher whose ‖Θ_i‖_F = 2·20^h: from the random family (h = 0) to near-hard attention (h = 1, 40).

    The draws do not depend on h (:func:`sample_teacher` rejects on conditions that are scale-free in Θ),
    so one seed is one teacher made sharper along the dial.  Found by ``runs/guarantee-dial/hard_search.py``:
    its hardest candidates inside the conditions were random-looking teachers at ‖Θ_i‖_F of 24–190.
    """
    theta_norm = RANDOM_NORM * (SATURATED_NORM / RANDOM_NORM) ** hardness
    return sample_teacher(heads, dim, theta_norm=theta_norm, rng=rng)


register_family(TeacherFamily(
    "saturated",
    f"random teachers at ‖Θ_i‖_F = {SATURATED_NORM:g}: near-one-hot attention, inside the non-degeneracy "
    f"conditions (which bound no norm); dial: hardness h sets ‖Θ_i‖_F = {RANDOM_NORM:g}·"
    f"{SATURATED_NORM / RANDOM_NORM:g}^h",
    saturated_teacher, dial="hardness"))

