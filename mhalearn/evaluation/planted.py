"""Plant → fit → measure: one learner on one planted instance ([design: experiments]).

Everything that compares learners on planted teachers goes through here —
the learning experiments (:mod:`mhalearn.experiments.learning`,
:mod:`mhalearn.experiments.families`), ``mhalearn learn`` and ``mhalearn
demo``, and the benchmarks:

- :func:`plant_instance` plants a teacher from a registered family and draws
  its training and test data, deterministically from the arguments;
- :func:`fit_timed` fits a learner with a
  :class:`~mhalearn.evaluation.TeacherObserver` watching, and times the fit
  without the observer's time;
- :func:`measure` compares the fitted layer with the teacher and reads the
  learner's ``report_`` and the observer's figures;
- :func:`learn_planted` does all three.
"""

from __future__ import annotations

import time

import numpy as np

from .._validation import check_positive_int, check_real
from ..attention.data import draw_inputs, make_dataset
from ..attention.model import head_collapse, parameter_error, relative_error
from ..attention.teachers import get_family, make_teacher, nondegeneracy
from ..learners.chen_li.fit import SpanSearchReport
from ..learners.registry import get_learner
from ..seeding import seeded_rng
from .observer import TeacherObserver

#: Fresh test inputs per planted instance.
TEST_SAMPLES = 1000


def instance_streams(family: str, heads: int, dim: int, length: int, samples: int, seed: int):
    """Independent generators for the teacher, the training set and the test set.

    The teacher's and the test set's depend on (family, m, d, k, seed) only,
    the training set's on n as well.
    """
    teacher_rng = seeded_rng(seed, family, heads, dim, length)
    train_parent, test_rng = teacher_rng.spawn(2)
    train_rng = seeded_rng(*train_parent.bit_generator.seed_seq.generate_state(2), samples)
    return teacher_rng, train_rng, test_rng


def plant_instance(*, heads: int, dim: int, length: int, samples: int, family: str = "random",
                   noise: float = 0.0, seed: int = 0, test_samples: int = TEST_SAMPLES, family_params=None):
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
    family_params : dict, optional
        The point of the family's dial (:func:`~mhalearn.make_teacher`); the
        teacher's draws depend on the seed alone, so one seed is one teacher
        moved along the dial, with the same training and test inputs.

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
    teacher_rng, train_rng, test_rng = instance_streams(family, heads, dim, length, samples, seed)
    teacher = make_teacher(family, heads, dim, teacher_rng, **(family_params or {}))
    X, Y = make_dataset(teacher, samples, length, law=law, noise=noise, rng=train_rng)
    return teacher, X, Y, draw_inputs(law, test_samples, length, dim, test_rng)


def measure(estimator, teacher, X: np.ndarray, Y: np.ndarray, X_test: np.ndarray, fit_seconds: float,
            observer: TeacherObserver | None = None) -> dict:
    """Metrics of a fitted learner against its planted teacher.

    Returns
    -------
    dict
        ``test_error`` (relative, on ``X_test`` against the noiseless
        teacher), ``train_error`` (relative, against the noisy training
        labels), ``theta_error`` and ``w_error`` (head-matched relative
        parameter errors), ``fit_seconds`` (the learner's, observers
        excluded), ``observer_seconds``; from a span-search learner's report,
        else None: ``candidates`` scored by the net search, ``agreement_rows``
        accepted for the sculpted body K*, ``span_route`` (``"body"``: Chen &
        Li's; ``"moment"``: ours) and, from the observer, ``span_distance`` of
        the chosen span to the teacher's; ``head_cosine`` and ``w_inflation``
        from :func:`~mhalearn.attention.model.head_collapse`; the teacher's
        non-degeneracy figures and whether it is inside Chen & Li's
        conditions (:meth:`~mhalearn.NondegeneracyReport.columns`).
    """
    parameters = parameter_error(estimator.model_, teacher)
    report = getattr(estimator, "report_", None)
    span_search = report if isinstance(report, SpanSearchReport) else None
    final_body = span_search.sculpt[-1] if span_search is not None and span_search.sculpt else None
    return {
        "test_error": relative_error(estimator.model_, teacher, X_test),
        "train_error": float(np.sum((estimator.model_.predict(X) - Y) ** 2) / np.sum(Y ** 2)),
        "theta_error": parameters["theta"],
        "w_error": parameters["w"],
        "fit_seconds": float(fit_seconds),
        "observer_seconds": None if observer is None else float(observer.seconds),
        "candidates": None if span_search is None else int(span_search.net.candidates),
        "agreement_rows": None if final_body is None else int(final_body.accepted_rows),
        "span_route": None if span_search is None else str(span_search.route),
        "span_distance": None if span_search is None or observer is None else observer.span_distance(
            span_search.route),
        **head_collapse(estimator.model_, teacher),
        **nondegeneracy(teacher).columns(),
    }


def fit_timed(estimator, X: np.ndarray, Y: np.ndarray, teacher=None) -> tuple[float, TeacherObserver | None]:
    """Fit ``estimator``, watched by a :class:`TeacherObserver` of ``teacher`` when one is given.

    Returns the fit's wall time without the observer's (the learner's own)
    and the observer (None without a teacher).
    """
    observer = None if teacher is None else TeacherObserver(teacher)
    start = time.perf_counter()
    estimator.fit(X, Y, callback=observer)
    seconds = time.perf_counter() - start
    return seconds - (0.0 if observer is None else observer.seconds), observer


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
    estimator_class = get_learner(learner)
    teacher, X, Y, X_test = plant_instance(heads=heads, dim=dim, length=length, samples=samples,
                                           family=family, noise=noise, seed=seed, test_samples=test_samples)
    estimator = estimator_class(heads, random_state=seed, **(hyperparams or {}))
    fit_seconds, observer = fit_timed(estimator, X, Y, teacher)
    return estimator, teacher, measure(estimator, teacher, X, Y, X_test, fit_seconds, observer)
