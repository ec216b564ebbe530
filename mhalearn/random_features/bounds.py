"""What the random-feature bound predicts for each target and model ([design: random-features]).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

**Taken from the paper** (its statement, not its proofs or constants): a
model f = Σ_h ⟨v_h, φ_h(X)⟩ on M frozen random features, fitted by
norm-constrained or ridge empirical risk minimisation on n samples, has
excess risk of order √(B(f)/n) + √(B(f)/M) up to constants and logarithms,
where B(f) is the size of the trainable weights needed to represent f: in the
infinite-width limit f = E_W⟨v(W), φ_W⟩ and B(f) bounds the smallest
E_W‖v(W)‖².  Also taken: the findings it implies (attention beats the MLP on
permutation-invariant targets; identity-mean query-key matrices beat zero-mean
ones on targets that depend on ⟨x_0, x_j⟩).  The paper's closed forms for B are
not reproduced here.

**Derived here** (for the models as built in
:mod:`mhalearn.random_features.models`: tokens on the sphere of radius √d,
ReLU, value bias, MLP with Gaussian biases).  The smallest E_W‖v(W)‖² is the
squared norm of f in the reproducing-kernel Hilbert space of the model's
infinite-width kernel K(X, X') = E_W⟨φ_W(X), φ_W(X')⟩, which the symmetries
of the input law make diagonal in spherical harmonics:

* zero-mean attention: K(X, X') = N⁻² Σ_{j,k} h(ρ_0, ρ_{jk}) with
  h(a, b) = κ(ab)(d·b + 1), ρ_0 = ⟨x_0, x'_0⟩/d, ρ_{jk} = ⟨x_j, x'_k⟩/d and
  κ(t) = (√(1 − t²) + (π − arccos t)t)/(2π) the arc-cosine kernel of ReLU.
  h is invariant under separate rotations of the query and of the key, so
  its eigenspaces are H_a ⊗ H_b (harmonics of degree a in the query, b in a
  key) with eigenvalues μ_ab = Σ_ℓ κ_ℓ E[t^ℓ P_a] (E[t^ℓ P_b] + d·E[t^{ℓ+1} P_b])
  (Funk–Hecke; κ_ℓ the Taylor coefficients of κ, P_a the Gegenbauer
  polynomial with P_a(1) = 1, t the cosine of two uniform points).  Because
  the odd part of ReLU is linear, κ_ℓ = 0 for odd ℓ ≥ 3: components odd in
  the query of degree ≥ 3 have μ = 0 and are not representable at any width.
* the random-feature MLP: K = H(ρ̄) = 2κ((1 + ρ̄)/2) with ρ̄ the mean of the
  N + 1 token cosines; eigenspaces are tensor products of harmonics of each
  token, eigenvalue E[H(ρ̄) Π_i P_{a_i}(ρ_i)], expanded exactly in the moments
  of the cosines.
* identity-mean attention has no such product structure (its logit
  ⟨x_0, x_j⟩/√d couples query and key).  Its Mehler expansion
  E_G[σ(g·u + z)σ(g·u' + z')] = Σ_ℓ c_ℓ(z)c_ℓ(z')⟨u, u'⟩^ℓ/ℓ! (z the
  correlation logit, c_0(z) = E σ(A + z) = zΦ(z) + ϕ(z)) shows its cheapest
  functions: the ℓ = 0 term gives the features c_0(z_j)·[x_j; 1] at a cost of
  order 1, every other function costs d² or more.  :func:`identity_tier_zero`
  measures how much of a target those features explain.

The target's energy in each eigenspace is exact (moments of Gegenbauer
polynomials; for ψ(z)⟨β, x_j⟩ the split of a product of a degree-a harmonic
with a linear function into degrees a ± 1), except the Gegenbauer coefficients
of ψ = ReLU and tanh, computed by adaptive quadrature.

From the spectrum (energy e_c, eigenvalue μ_c) the Tikhonov path
g_c = f_c μ_c/(μ_c + λ) gives, for every λ, the relative error
r(λ) = Σ e_c (λ/(μ_c + λ))²/Var f of the best approximation with norm
‖g‖²_K = Σ e_c μ_c/(μ_c + λ)², and the dimensionless complexity

    B(λ) = ‖g‖²_K · E‖φ − Eφ‖² / Var f,

the quantity whose square root over n bounds the estimation error (the
Rademacher complexity of the ball ‖v‖ ≤ r on features φ is r√(E‖φ‖²/n),
Bartlett & Mendelson 2002) and over M the approximation error of M heads.
:func:`bound_curve` is the bound's prediction min_λ [r(λ) + B(λ)/M + √(B(λ)/n)]
(constants set to 1: its level is indicative, its shape and the ranking of
models are the prediction).  For ``mean-linear`` with d = N = 16 the exact
values are B ≈ 2π·N·(E K(X,X) − E K(X,X')) ≈ 76 for zero-mean attention and
≈ 3d(N+1)(1 − 2κ(1/2)) ≈ 319 for the MLP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.special
from threadpoolctl import threadpool_limits

from .._validation import as_generator, check_choice, check_hyperparameters, check_positive_int
from .models import _RandomFeatureRidge
from .ridge import centred_moments
from .targets import RandomFeatureTarget, make_sequence_dataset

#: Models with an exact spectrum (identity-mean attention has none, see the module docstring).
SPECTRAL_MODELS = ("attention-zero", "mlp")
#: Largest harmonic degree kept; the target energy above it is counted as unexplained.
MAX_DEGREE = 24
#: Terms of the Taylor series of the kernels.
_SERIES = 160


# ---------------------------------------------------------------- special functions

@lru_cache(maxsize=None)
def _arccos_taylor(terms: int = _SERIES) -> np.ndarray:
    """κ_ℓ, ℓ < terms: Taylor coefficients of κ(t) = (√(1−t²) + (π − arccos t)t)/(2π) at 0.

    κ = 1/(2π) + t/4 + (√(1 − t²) − 1 + t·arcsin t)/(2π); the last part is even.
    """
    coefficients = np.zeros(terms)
    coefficients[0], coefficients[1] = 1 / (2 * math.pi), 0.25
    for k in range(1, terms // 2):
        sqrt_part = scipy.special.binom(0.5, k) * (-1) ** k  # √(1 − t²) = Σ binom(1/2, k)(−t²)^k
        arcsin_part = math.exp(math.lgamma(2 * k - 1) - (2 * k - 2) * math.log(2) - 2 * math.lgamma(k)) / (2 * k - 1)
        coefficients[2 * k] = (sqrt_part + arcsin_part) / (2 * math.pi)  # t·arcsin t = Σ_k c_{k−1} t^{2k}
    return coefficients


def arccos_kernel(t) -> np.ndarray:
    """κ(t) = E[ReLU(g)ReLU(g')] for standard Gaussians with correlation t."""
    t = np.clip(np.asarray(t, dtype=float), -1.0, 1.0)
    return (np.sqrt(1 - t * t) + (np.pi - np.arccos(t)) * t) / (2 * np.pi)


def harmonic_dimension(dim: int, degree: int) -> float:
    """N(d, a): the dimension of the spherical harmonics of degree a on S^{d−1}."""
    if degree == 0:
        return 1.0
    return (2 * degree + dim - 2) / degree * math.comb(degree + dim - 3, degree - 1)


@lru_cache(maxsize=None)
def _power_coefficients(dim: int, powers: int, degrees: int) -> np.ndarray:
    """M[ℓ, a] with t^ℓ = Σ_a M[ℓ, a] P_a(t), from t·P_a = ((a+d−2)P_{a+1} + a·P_{a−1})/(2a+d−2).

    Every entry is non-negative and each row sums to 1 (t = 1), so the table
    is exact to rounding for any ℓ.
    """
    table = np.zeros((powers, degrees + 1))
    table[0, 0] = 1.0
    for power in range(1, powers):
        previous = table[power - 1]
        for degree in range(degrees + 1):
            if previous[degree] == 0.0:
                continue
            denominator = 2 * degree + dim - 2
            if degree + 1 <= degrees:
                table[power, degree + 1] += previous[degree] * (degree + dim - 2) / denominator
            if degree >= 1:
                table[power, degree - 1] += previous[degree] * degree / denominator
            elif dim == 2:  # pragma: no cover - d = 2 has denominator 0 at degree 0
                raise ValueError("dim: expected >= 3")
    return table


def _moment_times_harmonic(dim: int, powers: int, degrees: int) -> np.ndarray:
    """E[t^ℓ P_a(t)] = M[ℓ, a]/N(d, a) for the cosine t of two uniform points of S^{d−1}."""
    dimensions = np.array([harmonic_dimension(dim, a) for a in range(degrees + 1)])
    return _power_coefficients(dim, powers, degrees) / dimensions


def _cosine_moments(dim: int, powers: int) -> np.ndarray:
    """E[t^ℓ], ℓ < powers: 0 for odd ℓ, Π_{i<ℓ/2} (2i+1)/(d+2i) for even ℓ."""
    moments = np.zeros(powers)
    moments[0] = 1.0
    for power in range(2, powers, 2):
        moments[power] = moments[power - 2] * (power - 1) / (dim + power - 2)
    return moments


def _sum_moments(single: np.ndarray, count: int) -> np.ndarray:
    """Moments of a sum of ``count`` i.i.d. variables with moments ``single`` (binomial convolution)."""
    powers = len(single)
    binomials = np.array([[math.comb(m, i) for i in range(powers)] for m in range(powers)], dtype=float)
    total = np.zeros(powers)
    total[0] = 1.0
    for _ in range(count):
        total = np.array([np.sum(binomials[m, :m + 1] * single[:m + 1] * total[m::-1]) for m in range(powers)])
    return total


# ---------------------------------------------------------------- kernel spectra

@dataclass(frozen=True)
class Spectrum:
    """Eigenvalues of one model's infinite-width kernel, and its centred feature norm.

    ``eigenvalue(a, b, key_count)`` is the eigenvalue on harmonics of degree a
    in the query and b in ``key_count`` ∈ {0, 1} key(s); ``feature_norm`` is
    E‖φ − Eφ‖² = E K(X, X) − E K(X, X') in the paper's per-head normalisation.
    ``averaged`` is True when the kernel is the mean embedding of a kernel on
    (query, key) pairs (attention): then a component of a key-average target is
    weighted as in :func:`target_spectrum`.
    """

    model: str
    dim: int
    keys: int
    table: np.ndarray  # (degrees+1, degrees+1): eigenvalue for query degree a, key degree b
    feature_norm: float
    averaged: bool


@lru_cache(maxsize=None)
def kernel_spectrum(model: str, dim: int, keys: int, degrees: int = MAX_DEGREE) -> Spectrum:
    """The exact eigenvalues (see the module docstring) of zero-mean attention or the random-feature MLP."""
    check_choice(model, "model", SPECTRAL_MODELS)
    dim, keys = check_positive_int(dim, "dim", 3), check_positive_int(keys, "keys")
    terms = _SERIES
    kappa = _arccos_taylor(terms)
    moments_p = _moment_times_harmonic(dim, terms + 1, degrees)  # E[t^ℓ P_a]
    cosine = _cosine_moments(dim, terms + 1)
    if model == "attention-zero":
        # μ_ab = Σ_ℓ κ_ℓ E[t^ℓ P_a] (E[t^ℓ P_b] + d E[t^{ℓ+1} P_b])
        value = moments_p[:terms] + dim * moments_p[1:terms + 1]  # (ℓ, b)
        table = np.einsum("l,la,lb->ab", kappa, moments_p[:terms], value)
        same_query = np.sum(kappa * (cosine[:terms] + dim * cosine[1:terms + 1]))  # E h(1, ρ)
        self_term = arccos_kernel(1.0) * (dim + 1)  # h(1, 1)
        independent = np.sum(kappa * cosine[:terms] * (cosine[:terms] + dim * cosine[1:terms + 1]))
        diagonal = self_term / keys + (1 - 1 / keys) * same_query
        return Spectrum(model, dim, keys, table, float(diagonal - independent), True)
    # MLP: H(u) = 2κ((1 + u)/2) = Σ_k h_k u^k with u = ρ̄ = (ρ_0 + ρ_j + R)/(N + 1), R a sum of N − 1 cosines
    powers = 64
    h = np.array([2 * np.sum(kappa[k:] * 0.5 ** np.arange(k, terms) * scipy.special.binom(np.arange(k, terms), k))
                  for k in range(powers)])
    rest = _sum_moments(cosine[:powers], keys - 1)
    i, j, m = np.meshgrid(np.arange(powers), np.arange(powers), np.arange(powers), indexing="ij")
    k = i + j + m
    valid = k < powers
    log_multinomial = (scipy.special.gammaln(k + 1) - scipy.special.gammaln(i + 1) - scipy.special.gammaln(j + 1)
                       - scipy.special.gammaln(m + 1))
    weight = np.where(valid, np.exp(log_multinomial - k * math.log(keys + 1)) * h[np.minimum(k, powers - 1)]
                      * rest[m], 0.0)  # (i, l, m)
    moments = moments_p[:powers]
    table = np.einsum("ilm,ia,lb->ab", weight, moments, moments)
    mean_moments = _sum_moments(cosine[:powers], keys + 1) / (keys + 1.0) ** np.arange(powers)
    independent = float(np.sum(h * mean_moments))
    return Spectrum(model, dim, keys, table, float(2 * arccos_kernel(1.0) - independent), False)


# ---------------------------------------------------------------- target spectra

@lru_cache(maxsize=None)
def _profile_coefficients(name: str, dim: int, degrees: int) -> np.ndarray:
    """E[ψ(√d t) P_a(t)] for the correlation profile ψ of ``name`` (ReLU or tanh), a <= degrees."""
    psi = {"correlation-relu": lambda z: np.maximum(z, 0.0), "correlation-tanh": np.tanh}[name]
    shape = (dim - 3) / 2
    normaliser = scipy.special.beta(0.5, (dim - 1) / 2)
    order = (dim - 2) / 2
    values = []
    for degree in range(degrees + 1):
        top = scipy.special.eval_gegenbauer(degree, order, 1.0)

        def integrand(t, degree=degree, top=top):
            return psi(math.sqrt(dim) * t) * scipy.special.eval_gegenbauer(degree, order, t) / top \
                * (1 - t * t) ** shape / normaliser

        parts = [scipy.integrate.quad(integrand, low, high, limit=400, epsabs=1e-15, epsrel=1e-12)[0]
                 for low, high in ((-1.0, 0.0), (0.0, 1.0))]
        values.append(sum(parts))
    return np.array(values)


def _profile_energy(name: str, dim: int) -> float:
    """E[ψ(√d t)²]: the whole L² mass of ψ(z)⟨β, x_j⟩ (⟨β, x_j⟩ has unit variance and is independent of z)."""
    psi = {"correlation-relu": lambda z: np.maximum(z, 0.0), "correlation-tanh": np.tanh}[name]
    shape, normaliser = (dim - 3) / 2, scipy.special.beta(0.5, (dim - 1) / 2)
    return sum(scipy.integrate.quad(lambda t: psi(math.sqrt(dim) * t) ** 2 * (1 - t * t) ** shape / normaliser,
                                    low, high, epsabs=1e-15, epsrel=1e-12)[0] for low, high in ((-1, 0), (0, 1)))


def target_components(name: str, dim: int, degrees: int = MAX_DEGREE) -> dict[tuple[int, int], float]:
    """{(a, b): ‖F_ab‖²} for f = (1/N) Σ_j F(x_0, x_j): L² mass of F in query degree a, key degree b.

    Exact for ``mean-linear`` and ``mean-power-p``; for ``correlation-*`` the
    Gegenbauer coefficients c_a of ψ come from quadrature and the product
    P_a(⟨s_0, s_j⟩)·⟨β, s_j⟩ splits into key degrees a + 1 and a − 1 in the
    ratio (a + d − 2) : a.  ``single-key`` is not a key average (see
    :func:`target_spectrum`).
    """
    if name == "mean-linear":
        return {(0, 1): 1.0}
    if name.startswith("mean-power-"):
        power = int(name.rsplit("-", 1)[1])
        table = _power_coefficients(dim, power + 1, power)[power]
        return {(a, a): dim ** power * table[a] ** 2 / harmonic_dimension(dim, a)
                for a in range(1, power + 1) if table[a] > 0}
    if name.startswith("correlation-"):
        coefficients = _profile_coefficients(name, dim, degrees)
        components: dict[tuple[int, int], float] = {}
        for a, inner in enumerate(coefficients):
            mass = harmonic_dimension(dim, a) * inner ** 2  # c_a²/N_a with c_a = N_a E[ψ P_a]
            up, down = (a + dim - 2) / (2 * a + dim - 2), a / (2 * a + dim - 2)
            components[(a, a + 1)] = components.get((a, a + 1), 0.0) + mass * up
            if a >= 1:
                components[(a, a - 1)] = components.get((a, a - 1), 0.0) + mass * down
        return components
    raise ValueError(f"name: expected a key-average target, received {name!r}")


def target_spectrum(name: str, model: str, dim: int, keys: int, degrees: int = MAX_DEGREE):
    """(energies, eigenvalues, feature_norm, unexplained) of target ``name`` for ``model``.

    Energies are L² masses of f = (1/N) Σ_j F(x_0, x_j) (they sum to Var f
    up to ``unexplained``, the mass above ``degrees`` or in eigenspaces the
    model cannot reach at all), and eigenvalues those of the model's kernel
    acting on L²(X) on that component.  For the attention kernel, a component
    of key degree b >= 1 averages N independent keys: its mass and eigenvalue
    are both divided by N (the norm of f equals that of F).
    ``single-key`` (⟨β, x_1⟩, not a key average): for the MLP its one
    component has the eigenvalue of a linear function of one key; attention
    is invariant, so only its key-average 1/N of the variance is reachable.
    """
    spectrum = kernel_spectrum(model, dim, keys, degrees)
    if name == "single-key":
        if model == "mlp":
            return np.array([1.0]), np.array([spectrum.table[0, 1]]), spectrum.feature_norm, 0.0
        energies, eigenvalues, norm, _ = target_spectrum("mean-linear", model, dim, keys, degrees)
        return energies, eigenvalues, norm, 1.0 - 1.0 / keys  # the non-invariant part
    components = target_components(name, dim, degrees)
    energies, eigenvalues = [], []
    for (a, b), mass in components.items():
        weight = 1.0 / keys if b >= 1 else 1.0
        energies.append(mass * weight)
        inside = a <= degrees and b <= degrees
        eigenvalues.append(spectrum.table[a, b] * (weight if spectrum.averaged else 1.0) if inside else 0.0)
    energies, eigenvalues = np.array(energies), np.array(eigenvalues)
    unreachable = float(energies[eigenvalues <= 0].sum())
    if name.startswith("correlation-"):  # the mass of ψ above the degrees kept (all in key degree >= 1)
        unreachable += max(_profile_energy(name, dim) - sum(components.values()), 0.0) / keys
    keep = eigenvalues > 0
    return energies[keep], eigenvalues[keep], spectrum.feature_norm, unreachable


def tikhonov_path(energies, eigenvalues, feature_norm: float, unexplained: float = 0.0,
                  ridges=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(λ, relative error r(λ), complexity B(λ)) along the Tikhonov path of the kernel (module docstring).

    ``unexplained`` is target variance no λ can reach (added to every error).
    """
    energies, eigenvalues = np.asarray(energies, float), np.asarray(eigenvalues, float)
    variance = energies.sum() + unexplained
    if ridges is None:
        ridges = np.logspace(math.log10(eigenvalues.min()) - 3, math.log10(eigenvalues.max()) + 3, 400)
    shrink = ridges[:, None] / (eigenvalues[None] + ridges[:, None])
    errors = ((energies * shrink ** 2).sum(axis=1) + unexplained) / variance
    norms = (energies * eigenvalues / (eigenvalues[None] + ridges[:, None]) ** 2).sum(axis=1)
    return ridges, errors, norms * feature_norm / variance


def complexity_at(name: str, model: str, dim: int, keys: int, error: float) -> float:
    """B needed for a relative error ``error`` (``math.inf`` when the model cannot go that low)."""
    ridges, errors, complexities = tikhonov_path(*target_spectrum(name, model, dim, keys))
    reachable = np.flatnonzero(errors <= error)
    return float(complexities[reachable.max()]) if reachable.size else math.inf


def bound_curve(name: str, model: str, dim: int, keys: int, samples, heads: float = math.inf) -> np.ndarray:
    """The bound's prediction min_λ [r(λ) + B(λ)/M + √(B(λ)/n)] at each n (constants 1; at most 1)."""
    ridges, errors, complexities = tikhonov_path(*target_spectrum(name, model, dim, keys))
    samples = np.atleast_1d(np.asarray(samples, dtype=float))
    total = errors[None] + complexities[None] / heads + np.sqrt(complexities[None] / samples[:, None])
    return np.minimum(total.min(axis=1), 1.0)


# ---------------------------------------------------------------- identity-mean attention

def identity_tier_zero(target: RandomFeatureTarget, *, keys: int, samples: int = 200_000, law: str = "sphere",
                       rng=0) -> float:
    """Relative error of the best fit of ``target`` by the cost-O(1) features of identity-mean attention.

    Those features are (1/N) Σ_j c_0(z_j)[x_j; 1] with c_0(z) = E_A σ(A + z) =
    zΦ(z) + ϕ(z) (A ~ N(0, 1) the random part of the logit, z_j = ⟨x_0, x_j⟩/√d
    its mean part): the ℓ = 0 term of the Mehler expansion of the
    identity-mean kernel.  Least squares with an intercept on ``samples``
    fresh inputs.
    """
    generator = as_generator(rng)
    X, y = make_sequence_dataset(target, samples, keys, law=law, rng=generator)
    z = np.einsum("nd,njd->nj", X[:, 0], X[:, 1:]) / math.sqrt(X.shape[2])
    weights = z * scipy.special.ndtr(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    features = np.concatenate([np.einsum("nj,njd->nd", weights, X[:, 1:]), weights.sum(1, keepdims=True)],
                              axis=1) / keys
    design = np.column_stack([features, np.ones(samples)])
    residual = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    return float(residual @ residual / np.sum((y - y.mean()) ** 2))


# ---------------------------------------------------------------- finite width, measured

def width_floor(model: _RandomFeatureRidge, targets: list[RandomFeatureTarget], *, keys: int, samples: int,
                law: str = "sphere", rng=None) -> dict[str, float]:
    """Best relative error each target can reach with this model's M frozen features (no sample limit).

    On a sample of ``samples`` inputs (it must exceed the p features; 8p keeps
    the estimate within a few per cent) the centred second moments give the
    population ridge path v_λ = (Σ + λI)⁻¹m; its error on a second independent
    sample, minimised over λ, is the floor.  ``model`` is unfitted; its
    ``random_state`` draws the features.
    """
    samples = check_positive_int(samples, "samples")
    if not targets:
        raise ValueError("targets: expected at least one RandomFeatureTarget, received none")
    generator = as_generator(rng)
    X_fit = make_sequence_dataset(targets[0], samples, keys, law=law, rng=generator)[0]
    X_eval = make_sequence_dataset(targets[0], samples, keys, law=law, rng=generator)[0]
    check_hyperparameters(model)
    width = model._draw(X_fit, as_generator(model.random_state))
    if samples <= width:
        raise ValueError(f"samples: expected more than the {width} features of the model, received {samples}")

    def moments(X):
        Y = np.column_stack([target(X) for target in targets])
        system = centred_moments(lambda start, stop: model._features(X[start:stop]), len(X), width, Y)
        return (system["matrix"] / len(X), system["rhs"] / len(X), system["feature_mean"],
                np.atleast_1d(system["target_mean"]), np.atleast_1d(system["target_ss"]) / len(X))

    gram, cross, mean, target_mean, _ = moments(X_fit)
    held_gram, held_cross, held_mean, held_target_mean, held_variance = moments(X_eval)
    with threadpool_limits(limits=1, user_api="blas"):
        eigenvalues, eigenvectors = scipy.linalg.eigh(gram, check_finite=False)
    eigenvalues = np.maximum(eigenvalues, 0.0)
    projected = eigenvectors.T @ cross
    shift, offset = held_mean - mean, held_target_mean - target_mean
    scale = np.trace(gram) / width
    best = np.full(len(targets), np.inf)
    for alpha in np.logspace(-10, 2, 49):
        weights = eigenvectors @ (projected / (eigenvalues + alpha * scale)[:, None])
        squared = (np.einsum("pt,pq,qt->t", weights, held_gram, weights) - 2 * np.sum(weights * held_cross, axis=0)
                   + held_variance + (shift @ weights - offset) ** 2)
        best = np.minimum(best, squared / held_variance)
    return {target.name: float(value) for target, value in zip(targets, best)}


__all__ = ["MAX_DEGREE", "SPECTRAL_MODELS", "Spectrum", "arccos_kernel", "bound_curve", "complexity_at",
           "harmonic_dimension", "identity_tier_zero", "kernel_spectrum", "target_components", "target_spectrum",
           "tikhonov_path", "width_floor"]
