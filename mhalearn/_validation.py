"""Input validation shared by every public entry point ([design: bad-input]).

Every check raises ``ValueError`` naming the argument, what was expected and
what was received, so that a user's mistake is reported where it was made and
not as a shape error deep inside a Numba kernel.
"""

from __future__ import annotations

import importlib
import numbers
import os
import sys

import numpy as np

from ._files import check_output_directory, check_output_file  # noqa: F401  (re-exported)
from ._memory import check_memory


def check_dense(value, name: str) -> None:
    """Raise ``ValueError`` naming the argument when ``value`` is a SciPy sparse array or matrix."""
    # Only an imported scipy.sparse makes sparse arrays: not importing it keeps the command line light.
    sparse = sys.modules.get("scipy.sparse")
    if sparse is not None and sparse.issparse(value):
        raise ValueError(f"{name}: expected a dense array, received a sparse {type(value).__name__} "
                         "(sparse input is not supported; pass value.toarray())")


def as_float_array(value, name: str, ndim: int, finite: bool = True) -> np.ndarray:
    """Return ``value`` as a C-contiguous float64 array of rank ``ndim`` with finite entries
    (unchecked when ``finite`` is False: the caller checks something stricter)."""
    check_dense(value, name)
    try:
        array = np.asarray(value)
    except Exception as error:  # pragma: no cover - exotic inputs
        raise ValueError(f"{name}: expected an array, received {type(value).__name__} ({error})") from None
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.bool_)
    ):
        raise ValueError(f"{name}: expected a numeric array, received dtype {array.dtype}")
    if np.iscomplexobj(array):
        raise ValueError(f"{name}: expected real values, received dtype {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{name}: expected an array of rank {ndim}, received shape {array.shape}")
    if not (array.dtype == np.float64 and array.flags.c_contiguous):
        # A copy: of another dtype or layout, or of a broadcast view that holds far fewer bytes than it shows.
        check_memory(8 * array.size, name, f"a float64 copy of the {array.dtype} array of shape {array.shape}"
                     f"{' (a broadcast view)' if 0 in array.strides and array.size > 1 else ''}",
                     lower=f"the size of {name}")
    array = np.ascontiguousarray(array, dtype=np.float64)
    if finite and not _numba_checks().all_finite(array.reshape(-1)):
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        raise ValueError(f"{name}: expected finite values, received {bad} non-finite entries")
    return array


def check_parameters(thetas, ws) -> tuple[np.ndarray, np.ndarray]:
    """Validate attention and projection matrices, both of shape ``(m, d, d)``."""
    thetas = as_float_array(thetas, "thetas", 3)
    ws = as_float_array(ws, "ws", 3)
    if thetas.shape[0] < 1:
        raise ValueError(f"thetas: expected heads >= 1, received shape {thetas.shape}")
    if thetas.shape[1] != thetas.shape[2]:
        raise ValueError(f"thetas: expected shape (heads, dim, dim), received {thetas.shape}")
    if thetas.shape[1] < 1:
        raise ValueError(f"thetas: expected dim >= 1, received shape {thetas.shape}")
    if ws.shape != thetas.shape:
        raise ValueError(f"ws: expected shape {thetas.shape} to match thetas, received {ws.shape}")
    return thetas, ws


def check_inputs(X, dim: int | None = None, name: str = "X", finite: bool = True) -> np.ndarray:
    """Validate a batch of sequences of shape ``(n, k, d)`` with n, k >= 1 (finite entries unless
    ``finite`` is False)."""
    X = as_float_array(X, name, 3, finite)
    n, k, d = X.shape
    if n < 1 or k < 1 or d < 1:
        raise ValueError(f"{name}: expected shape (samples, length, dim) with all sizes >= 1, received {X.shape}")
    if dim is not None and d != dim:
        raise ValueError(f"{name}: expected token dimension {dim} to match the parameters, received shape {X.shape}")
    return X


def check_pair(X, Y, dim: int | None = None, boolean: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validate inputs and labels of identical shape ``(n, k, d)``; with ``boolean`` every entry of X
    must be ±1 (:func:`check_boolean`)."""
    # Entries ±1 leave no room for NaN or ±inf: a Boolean X is read once, by check_boolean.
    X = check_inputs(X, dim, finite=not boolean)
    Y = check_inputs(Y, X.shape[2], name="Y")
    if Y.shape != X.shape:
        raise ValueError(f"Y: expected shape {X.shape} to match X, received {Y.shape}")
    if boolean:
        check_boolean(X)
    return X, Y


def _numba_checks():
    """:mod:`mhalearn._numba`, imported on the first array check (Numba costs a second; ``--version`` none)."""
    from . import _numba

    return _numba


def check_boolean(X: np.ndarray, name: str = "X", opt_in: str | None = "allow_non_boolean=True") -> None:
    """Raise unless every entry of ``X`` is +1 or -1; the message names the ``opt_in`` parameter if any."""
    flat = np.asarray(X).reshape(-1)  # in X's own dtype: int8 bits stay one byte each
    if flat.dtype == np.bool_:
        flat = flat.view(np.uint8)
    if not _numba_checks().all_plus_minus_one(flat):
        if np.issubdtype(flat.dtype, np.floating) and not _numba_checks().all_finite(flat):
            # NaN or ±inf is a damaged input, not a non-Boolean one that allow_non_boolean would accept.
            bad = int(flat.size - np.count_nonzero(np.isfinite(flat)))
            raise ValueError(f"{name}: expected finite values, received {bad} non-finite entries")
        hint = f" (pass {opt_in} to opt in)" if opt_in else ""
        raise ValueError(
            f"{name}: expected Boolean entries in {{-1, +1}}, received values such as "
            f"{X[np.abs(X) != 1.0][:3].tolist()}{hint}"
        )


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int, raising unless it is an integer >= ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an integer >= {minimum}, received {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, received {value}")
    return int(value)


def check_real(value, name: str, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """Return ``value`` as a finite float in the stated interval."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(f"{name}: expected a finite real number, received {value!r}")
    value = float(value)
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name}: expected a value {'>' if low_open else '>='} {low}, received {value}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name}: expected a value {'<' if high_open else '<='} {high}, received {value}")
    return value


def check_choice(value, name: str, choices) -> str:
    """Raise unless ``value`` is one of ``choices``, listing the valid ones."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {sorted(choices)}, received {value!r}")
    return value


def add_unique(registry: dict, name: str, value, kind: str):
    """Store ``value`` under ``name`` in one of the package's registries; a name is registered once."""
    if name in registry:
        raise ValueError(f"{kind}: name {name!r} is already registered")
    registry[name] = value
    return value


def registered(registry: dict, name: str, kind: str):
    """The entry called ``name`` of a registry; unknown names list the valid ones."""
    return registry[check_choice(name, kind, registry)]


def check_enough_samples(samples: int, unknowns: int, name: str = "X", *, heads: int | None = None,
                         dim: int | None = None) -> None:
    """Raise when there are fewer scalar equations than unknowns; given the layer's ``heads`` and ``dim``,
    the message starts with ``heads`` and says what the unknowns are."""
    if samples >= unknowns:
        return
    if heads is None:
        raise ValueError(f"{name}: expected at least {unknowns} scalar labels for the {unknowns} unknowns, "
                         f"received {samples}")
    raise ValueError(f"heads: {heads} heads of {dim} × {dim} matrices have {unknowns:,} unknowns (Θ_i and W_i), more "
                     f"than the {samples:,} scalar labels of {name}'s training sequences; lower heads or fit more "
                     f"sequences")


def as_generator(rng) -> np.random.Generator:
    """Accept ``None``, a seed >= 0 (or a ``SeedSequence``) or a ``Generator`` and return a ``Generator``."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence) or (
            isinstance(rng, numbers.Integral) and not isinstance(rng, (bool, np.bool_)) and rng >= 0):
        return np.random.default_rng(rng)
    raise ValueError(f"rng: expected None, an integer seed >= 0 or a numpy.random.Generator, received {rng!r}")


def check_sample_weight(sample_weight, samples: int) -> np.ndarray | None:
    """Return ``sample_weight`` as a float array of shape ``(samples,)``, or None when it is None.

    Weights must be finite and >= 0 with a positive sum (a weighted mean
    divides by it); anything else raises ``ValueError`` naming
    ``sample_weight``.  Shared by the estimators' ``score``.
    """
    if sample_weight is None:
        return None
    weights = as_float_array(sample_weight, "sample_weight", 1)
    if weights.shape != (samples,):
        raise ValueError(f"sample_weight: expected shape ({samples},), one weight per sample, "
                         f"received shape {weights.shape}")
    if np.any(weights < 0) or not weights.sum() > 0:
        raise ValueError(f"sample_weight: expected weights >= 0 with a positive sum, received weights from "
                         f"{weights.min():g} to {weights.max():g} summing to {weights.sum():g}")
    return weights


# ------------------------------------------------------------ hyper-parameters

class Integer:
    """Constraint: an integer in [low, high] (either end may be None)."""

    def __init__(self, low: int | None = None, high: int | None = None):
        self.low, self.high = low, high

    def holds(self, value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            return False
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"an integer >= {self.low}"
        return f"an integer in [{self.low}, {self.high}]"


class Real:
    """Constraint: a finite real number in an interval, each end open or closed."""

    def __init__(self, low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    def holds(self, value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not np.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    def __str__(self) -> str:
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high_open or self.high is None else "]"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"a real number in {left}{low}, {high}{right}"


class Options:
    """Constraint: one of a fixed set of values."""

    def __init__(self, *values):
        self.values = values

    def holds(self, value) -> bool:
        return any(value == option and type(value) is type(option) for option in self.values)

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


class Boolean:
    """Constraint: True or False, as a Python or a NumPy boolean (not 0 or 1)."""

    def holds(self, value) -> bool:
        return isinstance(value, (bool, np.bool_))

    def __str__(self) -> str:
        return "True or False"


class Seed:
    """Constraint: None, a non-negative integer seed or a numpy Generator."""

    def holds(self, value) -> bool:
        return value is None or isinstance(value, np.random.Generator) or (
            Integer(0).holds(value))

    def __str__(self) -> str:
        return "None, an integer seed >= 0 or a numpy.random.Generator"


class PathLike:
    """Constraint: a path, as ``str`` or ``os.PathLike`` (whether it can be written is checked apart)."""

    def holds(self, value) -> bool:
        return isinstance(value, (str, os.PathLike)) and str(value) != ""

    def __str__(self) -> str:
        return "a path (str or os.PathLike)"


class Instance:
    """Constraint: an instance of a class (a settings object, :class:`mhalearn._estimator.Settings`)."""

    def __init__(self, cls: type):
        self.cls = cls

    def holds(self, value) -> bool:
        return isinstance(value, self.cls)

    def __str__(self) -> str:
        return f"a {self.cls.__name__}"


class RealSequence:
    """Constraint: a non-empty list or tuple whose every entry satisfies ``entry`` (a :class:`Real`)."""

    def __init__(self, entry: Real):
        self.entry = entry

    def holds(self, value) -> bool:
        return (isinstance(value, (list, tuple, np.ndarray)) and len(value) > 0
                and all(self.entry.holds(item) for item in np.asarray(value, dtype=object).ravel()))

    def __str__(self) -> str:
        return f"a non-empty sequence of {self.entry}s"


def check_allowed(value, name: str, allowed: list):
    """Return ``value``, raising ``ValueError`` naming ``name`` unless one of the ``allowed`` constraints
    (:class:`Integer`, :class:`Real`… ; ``None`` in the list allows None) holds for it."""
    if value is None and None in allowed:
        return value
    if any(rule is not None and rule.holds(value) for rule in allowed):
        return value
    expected = " or ".join("None" if rule is None else str(rule) for rule in allowed)
    raise ValueError(f"{name}: expected {expected}, received {value!r}")


def check_hyperparameters(estimator) -> None:
    """Check every hyper-parameter of ``estimator`` against its class's
    ``_parameter_constraints`` (name → list of allowed constraints; ``None`` in
    the list allows None), raising ``ValueError`` naming the parameter, what
    was expected and what was received.  Called once, at the start of ``fit``."""
    constraints = type(estimator)._parameter_constraints
    for name, value in estimator.get_params(deep=False).items():
        check_allowed(value, name, constraints[name])


#: Largest absolute logit the attention kernels accept: the row-max shift of the softmax
#: subtracts two logits, and both the sum and the difference must stay finite.
LOGIT_LIMIT = np.finfo(np.float64).max / 4


def check_logit_range(X: np.ndarray, thetas: np.ndarray, name: str = "X") -> None:
    """Raise ``ValueError`` when the logits x_jᵀ Θ_i x_l of finite inputs could overflow.

    Uses the bound ``|x_jᵀ Θ x_l| ≤ max|x|² · Σ_ab |Θ_ab|``, which also bounds
    every partial sum of the products, so inputs that pass cannot produce an
    infinite logit (or a NaN softmax).  Costs one pass over ``X`` and the
    parameters, against the kernels' O(n·m·k·d·(k+d)).
    """
    if X.size == 0 or thetas.size == 0:
        return
    with np.errstate(over="ignore"):
        largest_entry = max(float(X.max()), -float(X.min()))
        theta_mass = float(np.abs(thetas).sum(axis=(1, 2)).max())
        bound = largest_entry * largest_entry * theta_mass
    if not bound <= LOGIT_LIMIT:
        raise ValueError(
            f"{name}: expected inputs whose attention logits x_j·Θ·x_l stay finite, received entries up to "
            f"{largest_entry:.3g} with Σ|Θ_i| up to {theta_mass:.3g}, so logits could reach {bound:.3g} "
            f"(limit {LOGIT_LIMIT:.3g}); rescale the inputs"
        )


def check_instance(value, name: str, expected: type | tuple, description: str | None = None):
    """Return ``value``, raising ``TypeError`` naming the argument unless it is an ``expected`` instance."""
    if not isinstance(value, expected):
        wanted = description or (" or ".join(kind.__name__ for kind in expected) if isinstance(expected, tuple)
                                 else expected.__name__)
        raise TypeError(f"{name}: expected {wanted}, received {type(value).__name__} ({value!r:.80})")
    return value


def check_predictor(value, name: str):
    """Return ``value``, raising ``TypeError`` unless it has a callable ``predict`` (a model or fitted learner)."""
    if not callable(getattr(value, "predict", None)):
        raise TypeError(f"{name}: expected a MultiHeadAttention or an object with predict(X), "
                        f"received {type(value).__name__} ({value!r:.80})")
    return value


# ------------------------------------------------------ optional dependencies

class MissingDependencyError(ImportError):
    """An optional dependency of the feature asked for is not installed; the message says how to install it."""


def check_optional_dependencies(purpose: str, extra: str, *modules: str) -> None:
    """Raise :class:`MissingDependencyError` unless every one of ``modules`` imports.

    The message is one line naming ``purpose``, what it needs and the pip
    extra that installs it, e.g. ``export --format parquet needs pandas and
    pyarrow: python3 -m pip install -e '.[tables]'`` (the package is
    installed from its source checkout).
    """
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        which = "" if len(missing) == len(modules) else f" ({' and '.join(missing)} not installed)"
        raise MissingDependencyError(f"{purpose} needs {' and '.join(modules)}{which}: "
                                     f"python3 -m pip install -e '.[{extra}]'")
