"""
Sparse variable creation in a few lines
=======================================

Sparse variable creation (Edelman, Goel, Kakade & Zhang, ICML 2022) in a few lines.

A hidden majority of 3 of T = 128 bits, 128 training examples: the attention
student finds the 3 positions and generalises; the MLP on the raw bits,
which needs a number of samples growing about linearly in T, does not yet.
Then a hidden parity of 3 of the 128 bits: it is uncorrelated with every
single bit, so gradient training of the attention student finds no signal,
while a search over all C(128, 3) parities identifies it from
log2 C(128, 3) + a few ≈ 25 examples — the information is there, the
difficulty is computational.
"""

import math

import numpy as np

from mhalearn.sparse_variables import AttentionStudent, MLPStudent, SparseBooleanTask, SparseParitySearch

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

parity = SparseBooleanTask(length=128, sparsity=3, function="parity", rng=3)
X_test, y_test = parity.sample(4000, rng=4)
samples = math.ceil(math.log2(math.comb(128, 3))) + 5
X, y = parity.sample(samples, rng=5)
search = SparseParitySearch(3, random_state=0).fit(X, y)
print(f"\n{parity}")
print(f"parity search on {samples} examples: support {search.support_.tolist()}, "
      f"{search.consistent_count_} consistent parit{'y' if search.consistent_count_ == 1 else 'ies'}, "
      f"test accuracy {search.score(X_test, y_test):.3f}")
X, y = parity.sample(2048, rng=5)
student = AttentionStudent(random_state=0).fit(X, y)
print(f"attention student on 2048 examples: test accuracy {student.score(X_test, y_test):.3f}")
