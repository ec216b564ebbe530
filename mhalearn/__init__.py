"""mhalearn: learning a single multi-head attention layer from examples.

The public API is re-exported here; see docs/design.md for the maths and the parts.
One package per study: :mod:`mhalearn.attention` (the layer, its kernels,
data and teachers), :mod:`mhalearn.learners` (Chen & Li's learner in
:mod:`mhalearn.learners.chen_li`, one module per phase, and the baselines
beside it), :mod:`mhalearn.evaluation` (the teacher's view of a fit, from
outside), :mod:`mhalearn.random_features`
(Fu, Guo, Bai & Mei) and :mod:`mhalearn.sparse_variables` (Edelman, Goel,
Kakade & Zhang); the shared Numba pieces are in :mod:`mhalearn._numba` and
the sweep machinery in :mod:`mhalearn.experiments`; learning from queries
(Bhattamishra, Shah, Hahn & Kanade) rather than examples is in
:mod:`mhalearn.queries`.  Sizes that cannot fit
are refused before anything is allocated, against the memory budget of
:func:`set_memory_budget`, or of :func:`memory_budget` inside a ``with``
block (:mod:`mhalearn._memory`).

Names are imported when first used (PEP 562), so ``import mhalearn`` and
``mhalearn --version`` cost no NumPy, Numba or scikit-learn import (only
llvmlite's, to read the host's vector width: :mod:`mhalearn._vector_width`);
a name's module is imported whole on its first access.
"""

from __future__ import annotations

import importlib

from ._vector_width import prefer_full_vector_width
from ._version import __version__  # noqa: F401  (mhalearn.__version__)

# Before any kernel is compiled: on a core with AVX-512, vectors of its full width (mhalearn/_vector_width.py).
prefer_full_vector_width()

#: The public names, by the module that defines them.
_EXPORTS = {
    "._memory": ["MemoryBudgetError", "get_memory_budget", "memory_budget", "peak_memory_mb", "set_memory_budget"],
    ".learners": ["LEARNERS", "BodySettings", "GradientLearner", "MomentLearner", "SculptLearner", "SearchSettings",
                  "get_learner", "make_learner"],
    ".learners.report": ["Observers", "StreamProgress"],
    ".evaluation": ["TeacherObserver"],
    ".attention": ["MultiHeadAttention", "NondegeneracyReport", "TEACHER_FAMILIES", "TeacherFamily",
                   "add_label_noise", "boolean_inputs", "draw_inputs", "gaussian_inputs", "get_family",
                   "head_collapse", "load_dataset", "make_dataset", "make_teacher", "match_heads", "nondegeneracy",
                   "parameter_error", "register_family", "relative_error", "sample_teacher"],
    ".random_features": ["RANDOM_FEATURE_TARGETS", "RandomFeatureAttention", "RandomFeatureMLP",
                         "RandomFeatureTarget", "make_random_feature_target", "make_sequence_dataset",
                         "sequence_inputs", "sphere_inputs"],
    ".queries": ["QueryLearner", "QueryOracle", "non_identifiable_pair", "split_head"],
    ".sparse_variables": ["AttentionStudent", "MLPStudent", "SparseBooleanTask", "SparseParitySearch"],
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [name for names in _EXPORTS.values() for name in names]


def __getattr__(name: str):
    """A public name or a submodule, imported on first use and kept as an attribute."""
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name], __name__), name)
    else:
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
