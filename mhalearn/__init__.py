"""mhalearn: learning a single multi-head attention layer from examples.

The public API is re-exported here; see docs/design.md for the maths and the parts.
One package per study: :mod:`mhalearn.attention` (the layer, its kernels,
data and teachers), :mod:`mhalearn.learners` (Chen & Li's learner in
:mod:`mhalearn.learners.chen_li`, one module per phase, and the baselines
beside it), :mod:`mhalearn.evaluation` (the teacher's view of a fit, from
outside), :mod:`mhalearn.random_features`
(Fu, Guo, Bai & Mei) and :mod:`mhalearn.sparse_variables` (Edelman, Goel,
Kakade & Zhang); the shared Numba pieces are in :mod:`mhalearn._numba` and
the sweep machinery in :mod:`mhalearn.experiments`.  Sizes that cannot fit
are refused before anything is allocated, against the memory budget of
:func:`set_memory_budget`, or of :func:`memory_budget` inside a ``with``
block (:mod:`mhalearn._memory`).
"""

from . import attention
from ._memory import get_memory_budget, memory_budget, set_memory_budget
from .attention import (
    TEACHER_FAMILIES,
    MultiHeadAttention,
    NondegeneracyReport,
    TeacherFamily,
    add_label_noise,
    boolean_inputs,
    draw_inputs,
    gaussian_inputs,
    get_family,
    head_collapse,
    load_dataset,
    make_dataset,
    make_teacher,
    match_heads,
    nondegeneracy,
    parameter_error,
    register_family,
    relative_error,
    sample_teacher,
)
from .evaluation import TeacherObserver
from .learners import LEARNERS, GradientLearner, MomentLearner, SculptLearner, get_learner, make_learner
from .random_features import (
    RANDOM_FEATURE_TARGETS,
    RandomFeatureAttention,
    RandomFeatureMLP,
    RandomFeatureTarget,
    make_random_feature_target,
    make_sequence_dataset,
    sequence_inputs,
    sphere_inputs,
)
from .sparse_variables import AttentionStudent, MLPStudent, SparseBooleanTask, SparseParitySearch

from ._version import __version__

__all__ = [
    "get_memory_budget",
    "memory_budget",
    "set_memory_budget",
    "LEARNERS",
    "GradientLearner",
    "MomentLearner",
    "SculptLearner",
    "TeacherObserver",
    "get_learner",
    "make_learner",
    *attention.__all__,  # the layer, its data and teachers
    "RANDOM_FEATURE_TARGETS",
    "RandomFeatureAttention",
    "RandomFeatureMLP",
    "RandomFeatureTarget",
    "make_random_feature_target",
    "make_sequence_dataset",
    "sequence_inputs",
    "sphere_inputs",
    "AttentionStudent",
    "MLPStudent",
    "SparseBooleanTask",
    "SparseParitySearch",
]
