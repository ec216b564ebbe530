"""
Random-feature attention in a few lines
=======================================

Random-feature attention vs a random-feature MLP (Fu, Guo, Bai & Mei; [design: random-features]).

A query x_0 and N = 16 keys on the sphere of radius √d (d = 16).  The target
f = (1/N) Σ_j ReLU(⟨x_0, x_j⟩/√d) ⟨β, x_j⟩ weights every key by its
correlation with the query.  Three models with the same 64·17 = 1088
trainable weights are fitted by ridge regression (α chosen by GCV):
attention with zero-mean and with identity-mean query–key matrices, and a
ReLU random-feature network on the flattened sequence.  Beside each error,
what the random-feature bound predicts (mhalearn.random_features.bounds):
for zero-mean attention and the MLP, min over λ of r(λ) + √(B(λ)/n) with
constants 1 (an upper-bound rate, not an estimate); for identity-mean
attention, the error of its cheap features c0(z)·[x_j; 1].

    python examples/random_features.py
"""

import mhalearn
from mhalearn.random_features import bounds

ALPHAS = (1e-3, 1e-2, 1e-1, 1.0)
dim, keys, heads = 16, 16, 64

target = mhalearn.make_random_feature_target("correlation-relu", dim, rng=0)
X_test, y_test = mhalearn.make_sequence_dataset(target, 2000, keys, rng=1)

models = {
    "attention-zero": mhalearn.RandomFeatureAttention(heads, qk_mean="zero", alpha=ALPHAS, random_state=0),
    "attention-identity": mhalearn.RandomFeatureAttention(heads, qk_mean="identity", alpha=ALPHAS, random_state=0),
    "mlp": mhalearn.RandomFeatureMLP(heads * (dim + 1), alpha=ALPHAS, random_state=0),
}
cheap = bounds.identity_tier_zero(target, keys=keys, samples=20_000)

print(f"relative test error (1 - R^2) on {target.name}, d = {dim}, N = {keys}, {heads * (dim + 1)} weights each;")
print("in brackets what the bound predicts")
print(f"{'n':>6}" + "".join(f"{name:>28}" for name in models))
for samples in (128, 256, 1024):
    X, y = mhalearn.make_sequence_dataset(target, samples, keys, rng=2)
    cells = []
    for name, model in models.items():
        error = 1 - model.fit(X, y).score(X_test, y_test)
        predicted = cheap if name == "attention-identity" else \
            bounds.bound_curve(target.name, name, dim, keys, [samples])[0]
        cells.append(f"{error:.3f} [{predicted:.3f}]")
    print(f"{samples:>6}" + "".join(f"{cell:>28}" for cell in cells))
