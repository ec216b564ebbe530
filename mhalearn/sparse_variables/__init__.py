"""Sparse variable creation (Edelman, Goel, Kakade & Zhang): the task, the students and the experiment.

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022
([design: sparse-variables]).

* :mod:`~mhalearn.sparse_variables.tasks` — :class:`SparseBooleanTask`,
  y = g(x_S) for a hidden support S of s out of T bits;
* :mod:`~mhalearn.sparse_variables.kernels` — the Numba kernels of one
  softmax head over Boolean tokens;
* :mod:`~mhalearn.sparse_variables.students` — :class:`AttentionStudent` and
  :class:`MLPStudent`, trained by AdamW on the logistic loss;
* :mod:`~mhalearn.sparse_variables.parity_search` —
  :class:`SparseParitySearch`, empirical risk minimisation over parities;
* :mod:`~mhalearn.sparse_variables.growth` — samples-to-target by bisection
  and the growth-law fits;
* :mod:`~mhalearn.experiments.sparse_variables` (the ``sparse-variables``
  experiments, registered when :mod:`mhalearn.experiments` is imported) and
  :mod:`~mhalearn.sparse_variables.summary` (their tables and figures).
"""

from .parity_search import SparseParitySearch
from .students import AttentionStudent, MLPStudent, adamw_descent, logistic_loss
from .tasks import FUNCTIONS, SparseBooleanTask, boolean_function

#: Student classes by the names experiments use, in plotting order: the two
#: gradient-trained students and the parity search.
STUDENTS = {"attention": AttentionStudent, "mlp": MLPStudent, "parity-search": SparseParitySearch}
STUDENT_NAMES = tuple(STUDENTS)
#: Students trained by AdamW (they take the experiment's frozen hyper-parameters).
GRADIENT_STUDENTS = ("attention", "mlp")

__all__ = ["AttentionStudent", "FUNCTIONS", "GRADIENT_STUDENTS", "MLPStudent", "STUDENTS", "STUDENT_NAMES",
           "SparseBooleanTask", "SparseParitySearch", "adamw_descent", "boolean_function", "logistic_loss"]
