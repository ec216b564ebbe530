"""Plant → fit → measure: one learner on one planted instance, and the one seeding helper (docs/design.md §5).

Everything that compares learners on planted teachers goes through here —
the learning experiments (:mod:`mhalearn.experiments.learning`,
:mod:`mhalearn.experiments.families`), ``mhalearn learn`` and ``mhalearn
demo``, and the benchmarks:

- :func:`plant_instance` plants a teacher from a registered family and draws
  its training and test data, deterministically from the arguments;
- :func:`fit_timed` fits a learner (the teacher goes to its diagnostics hook,
  never to the estimate) and times it;
- :func:`measure` compares the fitted layer with the teacher and reads the
  learner's ``report_``;
- :func:`learn_planted` does all three.

:func:`seeded_rng` turns a cell's parameters (integers and names) into a
random generator, the same in every process and on every machine.
"""

from __future__ import annotations

import math
import numbers
import time
import zlib

import numpy as np

from . import learners as learner_registry
from ._validation import check_positive_int, check_real
from .attention.data import draw_inputs, make_dataset
from .attention.model import head_collapse, parameter_error, relative_error
from .attention.teachers import get_family, make_teacher

#: Fresh test inputs per planted instance.
TEST_SAMPLES = 1000


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


def _streams(family: str, heads: int, dim: int, length: int, samples: int, seed: int):
    """Independent generators for the teacher, the training set and the test set.

    The teacher's and the test set's depend on (family, m, d, k, seed) only,
    the training set's on n as well.
    """
    teacher_rng = seeded_rng(seed, family, heads, dim, length)
    train_parent, test_rng = teacher_rng.spawn(2)
    train_rng = seeded_rng(*train_parent.bit_generator.seed_seq.generate_state(2), samples)
    return teacher_rng, train_rng, test_rng


def plant_instance(*, heads: int, dim: int, length: int, samples: int, family: str = "random",
                   noise: float = 0.0, seed: int = 0, test_samples: int = TEST_SAMPLES):
    """Plant a teacher and draw its training and test data, deterministically from the arguments.

    Parameters
    ----------
    heads, dim, length, samples : int
        m, d, k and n.
    family : str
        Registered teacher family (its input law is used).
    noise : float
        Standard deviation of the Gaussian label noise on the training set.
    seed : int
        Seeds the teacher (shared by every n and learner of the seed) and the data.
    test_samples : int
        Fresh test inputs.

    Returns
    -------
    teacher : MultiHeadAttention
    X, Y : arrays of shape (samples, length, dim)
        Training inputs and noisy labels.
    X_test : array of shape (test_samples, length, dim)
    """
    heads = check_positive_int(heads, "heads")
    dim = check_positive_int(dim, "dim")
    length = check_positive_int(length, "length")
    samples = check_positive_int(samples, "samples")
    test_samples = check_positive_int(test_samples, "test_samples")
    noise = check_real(noise, "noise", low=0.0)
    seed = check_positive_int(seed, "seed", minimum=0)
    law = get_family(family).law
    teacher_rng, train_rng, test_rng = _streams(family, heads, dim, length, samples, seed)
    teacher = make_teacher(family, heads, dim, teacher_rng)
    X, Y = make_dataset(teacher, samples, length, law=law, noise=noise, rng=train_rng)
    return teacher, X, Y, draw_inputs(law, test_samples, length, dim, test_rng)


def measure(estimator, teacher, X: np.ndarray, Y: np.ndarray, X_test: np.ndarray,
            fit_seconds: float) -> dict:
    """Metrics of a fitted learner against its planted teacher.

    Returns
    -------
    dict
        ``test_error`` (relative, on ``X_test`` against the noiseless
        teacher), ``train_error`` (relative, against the noisy training
        labels), ``theta_error`` and ``w_error`` (head-matched relative
        parameter errors), ``fit_seconds``; and from the learner's report,
        None when it has no such phase: ``candidates`` scored by the net
        search, ``agreement_rows`` accepted for the sculpted body K*,
        ``span_route`` (``"body"``: Chen & Li's; ``"moment"``: ours) and
        ``span_distance`` of the chosen span to the teacher's; ``head_cosine`` and
        ``w_inflation`` from :func:`~mhalearn.attention.model.head_collapse`.
    """
    parameters = parameter_error(estimator.model_, teacher)
    report = getattr(estimator, "report_", None) or {}
    candidates = _report_figure(report, "net", "candidates")
    agreement_rows = _report_figure(report, "sculpt", "accepted_rows")
    return {
        "test_error": relative_error(estimator.model_, teacher, X_test),
        "train_error": float(np.sum((estimator.model_.predict(X) - Y) ** 2) / np.sum(Y ** 2)),
        "theta_error": parameters["theta"],
        "w_error": parameters["w"],
        "fit_seconds": float(fit_seconds),
        "candidates": None if candidates is None else int(candidates),
        "agreement_rows": None if agreement_rows is None else int(agreement_rows),
        "span_route": (report.get("span") or {}).get("chosen"),
        "span_distance": _report_figure(report, "span", "chosen_distance"),
        **head_collapse(estimator.model_, teacher),
    }


def _report_figure(report, phase: str, name: str) -> float | None:
    """``report[phase][name]`` as a finite float, or None when absent."""
    entry = report.get(phase)
    value = entry.get(name) if entry is not None and hasattr(entry, "get") else None
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def fit_timed(estimator, X: np.ndarray, Y: np.ndarray, teacher=None) -> float:
    """Fit ``estimator`` (the teacher goes to its diagnostics hook) and return the wall time in seconds."""
    start = time.perf_counter()
    estimator.fit(X, Y, teacher=teacher)
    return time.perf_counter() - start


def learn_planted(learner: str, *, heads: int, dim: int, length: int, samples: int,
                  family: str = "random", noise: float = 0.0, seed: int = 0,
                  test_samples: int = TEST_SAMPLES, hyperparams: dict | None = None):
    """Plant a teacher, draw examples, fit a learner and measure it.

    Parameters
    ----------
    learner : str
        Registered learner name (unknown names raise ``ValueError`` listing the valid ones).
    heads, dim, length, samples, family, noise, seed, test_samples
        As in :func:`plant_instance`; the learner gets ``random_state=seed``.
    hyperparams : dict, optional
        Keyword hyper-parameters of the learner.

    Returns
    -------
    fitted : learner
        The fitted estimator (``model_``, ``report_``).
    teacher : MultiHeadAttention
        The planted teacher.
    metrics : dict
        See :func:`measure`.
    """
    estimator_class = learner_registry.get_learner(learner)
    teacher, X, Y, X_test = plant_instance(heads=heads, dim=dim, length=length, samples=samples,
                                           family=family, noise=noise, seed=seed, test_samples=test_samples)
    estimator = estimator_class(heads, random_state=seed, **(hyperparams or {}))
    fit_seconds = fit_timed(estimator, X, Y, teacher)
    return estimator, teacher, measure(estimator, teacher, X, Y, X_test, fit_seconds)
