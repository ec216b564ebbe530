"""Planted teachers that satisfy explicit non-degeneracy conditions ([design: teacher]).

A teacher is a :class:`~mhalearn.MultiHeadAttention` whose heads are distinct,
whose attention matrices have a fixed Frobenius norm and whose projection sum
is well conditioned.  :func:`sample_teacher` rejection-samples until
:func:`nondegeneracy` passes; named families (``random``, ``peaked``,
``shared`` …) are registered in :data:`TEACHER_FAMILIES` so experiments can
sweep over them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from .._memory import check_memory
from .._validation import (
    add_unique,
    as_float_array,
    as_generator,
    check_choice,
    check_instance,
    check_positive_int,
    check_real,
    registered,
)
from .data import INPUT_LAWS
from .model import MultiHeadAttention

DEFAULT_GRAM_FLOOR = 0.2
DEFAULT_CONDITION_CEILING = 20.0
DEFAULT_W_FLOOR = 0.5


@dataclass(frozen=True)
class NondegeneracyReport:
    """How far a layer is from the degenerate cases a learner cannot resolve.

    Attributes
    ----------
    theta_norms : Frobenius norms ‖Θ_i‖_F.
    gram_ratio : smallest / largest eigenvalue of the Gram matrix of the
        normalised vec(Θ_i) (1 for orthogonal heads, 0 for repeated ones).
    w_sum_condition : condition number κ(W_Σ) of W_Σ = Σ_i W_i.
    w_norm_min : min_i ‖W_i‖_F / √d.
    gram_floor, condition_ceiling, w_floor : the thresholds applied.
    """

    theta_norms: list
    gram_ratio: float
    w_sum_condition: float
    w_norm_min: float
    gram_floor: float = DEFAULT_GRAM_FLOOR
    condition_ceiling: float = DEFAULT_CONDITION_CEILING
    w_floor: float = DEFAULT_W_FLOOR

    @property
    def heads_distinct(self) -> bool:
        return self.gram_ratio >= self.gram_floor

    @property
    def sum_well_conditioned(self) -> bool:
        return self.w_sum_condition <= self.condition_ceiling

    @property
    def every_head_matters(self) -> bool:
        return self.w_norm_min >= self.w_floor

    @property
    def ok(self) -> bool:
        return self.heads_distinct and self.sum_well_conditioned and self.every_head_matters

    def failures(self) -> list[str]:
        """Human-readable list of the conditions that fail."""
        out = []
        if not self.heads_distinct:
            out.append(f"Gram eigenvalue ratio {self.gram_ratio:.3g} < {self.gram_floor}")
        if not self.sum_well_conditioned:
            out.append(f"κ(W_Σ) = {self.w_sum_condition:.3g} > {self.condition_ceiling}")
        if not self.every_head_matters:
            out.append(f"min ‖W_i‖_F/√d = {self.w_norm_min:.3g} < {self.w_floor}")
        return out

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def columns(self) -> dict:
        """The figures as flat columns of a results row (``inside_conditions``: all three hold)."""
        return {"gram_ratio": self.gram_ratio, "w_sum_condition": self.w_sum_condition,
                "w_norm_min": self.w_norm_min, "theta_norm_min": float(min(self.theta_norms)),
                "theta_norm_max": float(max(self.theta_norms)), "inside_conditions": self.ok}


def nondegeneracy(model: MultiHeadAttention, *, gram_floor: float = DEFAULT_GRAM_FLOOR,
                  condition_ceiling: float = DEFAULT_CONDITION_CEILING,
                  w_floor: float = DEFAULT_W_FLOOR) -> NondegeneracyReport:
    """Measure the non-degeneracy conditions of [design: teacher] on ``model``."""
    norms = np.linalg.norm(model.thetas.reshape(model.heads, -1), axis=1)
    if np.any(norms == 0):
        gram_ratio = 0.0
    else:
        unit = model.thetas.reshape(model.heads, -1) / norms[:, None]
        eig = np.linalg.eigvalsh(unit @ unit.T)
        gram_ratio = float(max(eig[0], 0.0) / eig[-1])
    singular = np.linalg.svd(model.projection_sum, compute_uv=False)
    condition = float(singular[0] / singular[-1]) if singular[-1] > 0 else float("inf")
    w_norm_min = float(np.min(np.linalg.norm(model.ws.reshape(model.heads, -1), axis=1)) / np.sqrt(model.dim))
    return NondegeneracyReport(norms.tolist(), gram_ratio, condition, w_norm_min,
                               gram_floor, condition_ceiling, w_floor)


def _draw_layer(heads: int, dim: int, theta_norm: float, shared: float,
                w_scales: np.ndarray, rng: np.random.Generator) -> MultiHeadAttention:
    common = rng.standard_normal((dim, dim))
    own = rng.standard_normal((heads, dim, dim))
    thetas = shared * common[None] + (1.0 - shared) * own
    thetas *= theta_norm / np.linalg.norm(thetas.reshape(heads, -1), axis=1)[:, None, None]
    ws = rng.standard_normal((heads, dim, dim)) / np.sqrt(dim)
    return MultiHeadAttention(thetas, ws * w_scales[:, None, None])


def sample_teacher(heads: int, dim: int, *, theta_norm: float = 2.0, shared: float = 0.0,
                   w_scales=None, rng=None, max_tries: int = 1000, gram_floor: float = DEFAULT_GRAM_FLOOR,
                   condition_ceiling: float = DEFAULT_CONDITION_CEILING,
                   w_floor: float = DEFAULT_W_FLOOR) -> MultiHeadAttention:
    """Draw a random non-degenerate teacher layer.

    Θ_i = ρ·Θ_0 + (1 − ρ)·G_i rescaled to ‖Θ_i‖_F = ``theta_norm`` (ρ =
    ``shared``; Θ_0, G_i standard Gaussian); W_i with i.i.d. N(0, 1/d)
    entries, multiplied by ``w_scales[i]``.  Draws are rejected until
    :func:`nondegeneracy` passes on the scaled layer.

    Parameters
    ----------
    heads, dim : number of heads m ≥ 1 and token dimension d ≥ 1.
    theta_norm : Frobenius norm of every Θ_i; 2 gives peaked but not one-hot
        attention on Boolean inputs, 6–12 near-hard attention.
    shared : weight ρ ∈ [0, 1) of a component common to all heads; larger ρ
        makes heads agree more often (and lowers the Gram ratio, so a large
        ρ may need a lower ``gram_floor``).
    w_scales : per-head multipliers of W_i, shape (heads,), all > 0
        (default all 1); unequal scales plant dominant and faint heads.
    rng : seed or ``numpy.random.Generator``; the same seed gives the same teacher.
    max_tries : rejection-sampling budget before raising ``ValueError``.
    """
    heads = check_positive_int(heads, "heads")
    dim = check_positive_int(dim, "dim")
    theta_norm = check_real(theta_norm, "theta_norm", low=0.0, low_open=True)
    shared = check_real(shared, "shared", low=0.0, high=1.0, high_open=True)
    max_tries = check_positive_int(max_tries, "max_tries")
    # Θ, W and the draws they come from (m × d × d each), the heads' Gram matrix (m × m), the SVD of Σ Θ_i;
    # checked before any array of m entries is made (the default w_scales is one).
    check_memory(8 * (4 * heads * dim * dim + heads * heads + 2 * dim * dim), "heads" if heads >= dim else "dim",
                 f"a teacher of {heads} head(s) of {dim} × {dim} matrices", lower="heads or dim")
    w_scales = np.ones(heads) if w_scales is None else as_float_array(w_scales, "w_scales", 1)
    if w_scales.shape != (heads,) or np.any(w_scales <= 0):
        raise ValueError(f"w_scales: expected {heads} finite positive numbers, received {w_scales!r}")
    rng = as_generator(rng)
    last = None
    for _ in range(max_tries):
        layer = _draw_layer(heads, dim, theta_norm, shared, w_scales, rng)
        last = nondegeneracy(layer, gram_floor=gram_floor, condition_ceiling=condition_ceiling,
                             w_floor=w_floor)
        if last.ok:
            return layer
    raise ValueError(
        f"sample_teacher: no teacher with heads={heads}, dim={dim}, shared={shared} met the "
        f"non-degeneracy conditions in {max_tries} tries (last draw: {'; '.join(last.failures())}); "
        "lower gram_floor or shared, or raise max_tries"
    )


# ----------------------------------------------------------------- families

@dataclass(frozen=True)
class TeacherFamily:
    """A named way to plant teachers, swept over by experiments.

    ``build(heads, dim, rng, **params)`` returns a teacher; ``samples``
    (optional) overrides the experiment's sample count, given (heads, dim,
    length).  ``dial`` (optional) names the one keyword ``build`` takes, a
    number in [0, 1] that moves the family from random teachers (0) to the
    family as described (1, its default): :func:`make_teacher` checks it.
    """

    name: str
    description: str
    build: Callable[..., MultiHeadAttention]
    samples: Callable[[int, int, int], int] | None = field(default=None)
    law: str = "boolean"
    dial: str | None = None


#: The registered teacher families, by name (:func:`register_family` adds one).
TEACHER_FAMILIES: dict[str, TeacherFamily] = {}


def register_family(family: TeacherFamily) -> TeacherFamily:
    """Add ``family`` to :data:`TEACHER_FAMILIES` (its name must be new)."""
    check_instance(family, "family", TeacherFamily, "a TeacherFamily(name, description, build, ...)")
    check_instance(family.name, "family.name", str)
    if not callable(family.build):
        raise TypeError(f"family.build: expected a callable (heads, dim, rng) -> MultiHeadAttention, "
                        f"received {type(family.build).__name__}")
    if family.samples is not None and not callable(family.samples):
        raise TypeError(f"family.samples: expected None or a callable (heads, dim, length) -> int, "
                        f"received {type(family.samples).__name__}")
    check_choice(family.law, "family.law", INPUT_LAWS)
    if family.dial is not None:
        check_instance(family.dial, "family.dial", str)
    return add_unique(TEACHER_FAMILIES, family.name, family, "family")


def get_family(name: str) -> TeacherFamily:
    """The registered family called ``name``; unknown names list the valid ones."""
    return registered(TEACHER_FAMILIES, name, "family")


def check_family_params(family: str, params: dict) -> dict:
    """``params`` checked against the named family's dial: its one name, a number in [0, 1], or nothing."""
    dial = get_family(family).dial
    allowed = [] if dial is None else [dial]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"family {family!r}: expected the parameters {allowed}, received {unknown}"
                         + ("" if allowed else " (this family has no dial)"))
    return {name: check_real(value, f"{family} {name}", low=0.0, high=1.0) for name, value in params.items()}


def dial_params(family: str, hardness: float | None) -> dict:
    """The keyword a grid's ``hardness`` sets on the named family ({} when the grid gives none)."""
    if hardness is None:
        return {}
    dial = get_family(family).dial
    if dial is None:
        raise ValueError(f"family {family!r}: received hardness = {hardness!r}, but this family has no dial")
    return {dial: hardness}


def make_teacher(family: str, heads: int, dim: int, rng=None, **params) -> MultiHeadAttention:
    """Plant a teacher from the named family, at a point of its dial when it has one.

    ``make_teacher("cancelling", 3, 12, rng=0, hardness=0.5)`` is halfway
    from random teachers (``hardness=0``) to the ``cancelling`` family
    (``hardness=1``, the default); ``TeacherFamily.dial`` names the
    parameter.  The same ``rng`` gives the same underlying draws at every
    point of the dial, so one seed is one teacher moved along it.
    """
    params = check_family_params(family, params)
    return get_family(family).build(heads, dim, as_generator(rng), **params)


register_family(TeacherFamily(
    "random", "default random teacher, ‖Θ_i‖_F = 2",
    lambda heads, dim, rng: sample_teacher(heads, dim, rng=rng)))
register_family(TeacherFamily(
    "peaked", "near-hard attention, ‖Θ_i‖_F = 8",
    lambda heads, dim, rng: sample_teacher(heads, dim, theta_norm=8.0, rng=rng)))
register_family(TeacherFamily(
    "shared", "heads with a common component (ρ = 0.5), ‖Θ_i‖_F = 3",
    lambda heads, dim, rng: sample_teacher(heads, dim, theta_norm=3.0, shared=0.5, rng=rng,
                                           gram_floor=0.1)))
register_family(TeacherFamily(
    "low-sample", "default teachers with n = 2·m·d² examples, as many as the unknowns (Θ and W)",
    lambda heads, dim, rng: sample_teacher(heads, dim, rng=rng),
    samples=lambda heads, dim, length: 2 * heads * dim * dim))

#: How much larger W_1 is than every other W_i in the ``dominant-head`` family.
DOMINANT_HEAD_SCALE = 10.0


def _dominant_head_teacher(heads: int, dim: int, rng: np.random.Generator) -> MultiHeadAttention:
    scales = np.ones(heads)
    scales[0] = DOMINANT_HEAD_SCALE
    return sample_teacher(heads, dim, w_scales=scales, rng=rng)


# Random-start gradient descent fails here in most seeds once m ≥ 2: every
# student head first chases the dominant head, which carries ~98 % of the
# output; two students then sit on top of it with large opposite W's, whose
# difference imitates a faint head to first order, and L-BFGS slides down that
# valley (W growing without bound) instead of separating the heads.  The
# span-based learners never start from merged heads.
register_family(TeacherFamily(
    "dominant-head",
    f"one head's W scaled {DOMINANT_HEAD_SCALE:g}×: the faint heads carry ~1–2 % of the output "
    "(random-start gradient descent merges heads)",
    _dominant_head_teacher))
