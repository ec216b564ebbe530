"""mhalearn: learning a single multi-head attention layer from examples.

The public API is re-exported here; see docs/design.md for the maths and the parts.
"""

from .data import add_label_noise, boolean_inputs, draw_inputs, gaussian_inputs, make_dataset
from .model import MultiHeadAttention, head_collapse, match_heads, parameter_error, relative_error
from .learners import (
    LEARNERS,
    GradientLearner,
    MomentLearner,
    SculptLearner,
    format_phase_table,
    get_learner,
    make_learner,
)
from .learners.random_features import RandomFeatureAttention, RandomFeatureMLP
from .random_feature_targets import (
    RANDOM_FEATURE_TARGETS,
    RandomFeatureTarget,
    make_random_feature_target,
    make_sequence_dataset,
    sequence_inputs,
    sphere_inputs,
)
from .sparse import AttentionStudent, MLPStudent, SparseBooleanTask, SparseParitySearch
from .teachers import (
    TEACHER_FAMILIES,
    NondegeneracyReport,
    TeacherFamily,
    get_family,
    make_teacher,
    nondegeneracy,
    register_family,
    sample_teacher,
)

__version__ = "0.1.0"

__all__ = [
    "LEARNERS",
    "GradientLearner",
    "MomentLearner",
    "SculptLearner",
    "format_phase_table",
    "get_learner",
    "make_learner",
    "MultiHeadAttention",
    "NondegeneracyReport",
    "TEACHER_FAMILIES",
    "TeacherFamily",
    "add_label_noise",
    "boolean_inputs",
    "draw_inputs",
    "gaussian_inputs",
    "get_family",
    "make_dataset",
    "make_teacher",
    "head_collapse",
    "match_heads",
    "nondegeneracy",
    "parameter_error",
    "register_family",
    "relative_error",
    "sample_teacher",
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
