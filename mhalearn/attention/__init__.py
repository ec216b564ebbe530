"""The multi-head attention layer: the model, its Numba kernels, input laws and planted teachers.

F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i, the object every learner of
:mod:`mhalearn.learners` recovers ([design: object], [design: kernels]):

* :mod:`~mhalearn.attention.model` — :class:`MultiHeadAttention` and the
  error measures (relative error, head matching, parameter error, head collapse);
* :mod:`~mhalearn.attention.kernels` — forward pass, attention weights, head
  features and loss-and-gradient in Numba ([design: kernels]), the forward pass's
  kernel, 8 sequences side by side, in ``mhalearn.attention.forward_kernel``;
* :mod:`~mhalearn.attention.data` — input laws and labelled datasets;
* :mod:`~mhalearn.attention.teachers` — planted teachers with explicit
  non-degeneracy conditions and the registry of teacher families ([design: teacher]);
* :mod:`~mhalearn.attention.hard_teachers` — families built so that m matters
  (near-identical, sharp, small-margin and cancelling heads);
* :mod:`~mhalearn.attention.interop` — PyTorch and JAX conversion (optional extras).
"""

from . import (
    hard_teachers,  # noqa: E402,F401  registers the hard teacher families
    teacher_source,  # noqa: F401  registers the stream make_dataset's Dask arrays are read as
)
from .data import add_label_noise, boolean_inputs, draw_inputs, gaussian_inputs, load_dataset, make_dataset
from .model import MultiHeadAttention, head_collapse, match_heads, parameter_error, relative_error
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

__all__ = [
    "MultiHeadAttention",
    "NondegeneracyReport",
    "TEACHER_FAMILIES",
    "TeacherFamily",
    "add_label_noise",
    "boolean_inputs",
    "draw_inputs",
    "gaussian_inputs",
    "get_family",
    "head_collapse",
    "load_dataset",
    "make_dataset",
    "make_teacher",
    "match_heads",
    "nondegeneracy",
    "parameter_error",
    "register_family",
    "relative_error",
    "sample_teacher",
]
