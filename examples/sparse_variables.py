"""
Sparse variable creation in a few lines
=======================================

Sparse variable creation (Edelman, Goel, Kakade & Zhang, ICML 2022) in a few lines.

A hidden majority of 3 of T = 128 bits, 128 training examples: the attention
student finds the 3 positions and generalises; the MLP on the raw bits,
which needs a number of samples growing linearly in T, does not yet.
"""

import numpy as np

from mhalearn.sparse import AttentionStudent, MLPStudent, SparseBooleanTask

task = SparseBooleanTask(length=128, sparsity=3, function="majority", rng=0)
X, y = task.sample(128, rng=1)
X_test, y_test = task.sample(4000, rng=2)
print(task)

attention = AttentionStudent(random_state=0).fit(X, y)
mlp = MLPStudent(random_state=0).fit(X, y)
print(f"attention student: test accuracy {attention.score(X_test, y_test):.3f}")
print(f"MLP student:       test accuracy {mlp.score(X_test, y_test):.3f}")

weights = attention.attention(X_test).mean(axis=0)
top = np.argsort(weights)[::-1][:5]
print("positions the head attends to most:", top.tolist(), "weights", np.round(weights[top], 3).tolist())
print(f"attention on the hidden support: {weights[task.support].sum():.2f} (uniform attention: {3 / 128:.2f})")
