r"""PyTorch and JAX interop for :class:`~mhalearn.MultiHeadAttention` (optional extras ``torch``, ``jax``).

``python3 -m pip install -e '.[torch]'`` / ``'.[jax]'``.  Nothing here is
imported until used; without the extra, a call raises
:class:`~mhalearn._validation.MissingDependencyError` (an ``ImportError``)
saying how to install it.

PyTorch
    :func:`to_torch` returns a :class:`torch.nn.Module` whose Θ and W are
    float64 parameters and whose forward is F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i
    (equal to :meth:`~mhalearn.MultiHeadAttention.predict` up to rounding,
    1e-15 relative), so a learned layer can be fine-tuned or composed with
    autograd.  :meth:`~mhalearn.MultiHeadAttention.from_torch` reads it back exactly, and also reads a
    :class:`torch.nn.MultiheadAttention` used as self-attention
    (``mha(X, X, X)``) into the same form, so a head of a real transformer
    can be planted as a teacher.

JAX
    :func:`to_jax` returns ``(apply, params)``: a pure function
    ``apply(params, X)`` of a params dict ``{"thetas", "ws"}`` and the float64
    params of the layer.  JAX computes in float32 unless ``jax_enable_x64``
    is on, which would lose eight of the sixteen digits of
    :meth:`~mhalearn.MultiHeadAttention.predict`; so both :func:`to_jax` and
    ``apply`` raise ``RuntimeError`` while it is off, saying how to turn it
    on: ``jax.config.update("jax_enable_x64", True)`` at start-up (or the
    environment variable ``JAX_ENABLE_X64=1``).

Mapping a ``torch.nn.MultiheadAttention(embed_dim=d, num_heads=m)``
---------------------------------------------------------------------
PyTorch splits ``in_proj_weight`` into W_Q, W_K, W_V (each d×d, acting as
q = x W_Qᵀ) and cuts each into m blocks of d_h = d/m rows, one per head;
``out_proj.weight`` = W_O (d×d).  Head h scores q_h·k_h/√d_h and outputs
softmax(·) V_h, and the heads' outputs, concatenated, go through W_O.  So,
with row-vector tokens as in mhalearn,

.. math::

    Θ_h = W_{Q,h}^\top W_{K,h} / \sqrt{d_h}, \qquad
    W_h = W_{V,h}^\top \, W_{O}[:, h d_h:(h+1) d_h]^\top ,

both d×d of rank at most d_h = d/m.  The map is exact when

- the module is self-attention on one sequence: query = key = value = X,
  no attention mask, no dropout (``mha.eval()`` or ``dropout=0``);
- ``kdim = vdim = embed_dim`` (one packed ``in_proj_weight``),
  ``add_bias_kv=False`` and ``add_zero_attn=False``;
- the biases of the query, value and output projections are zero (a query
  bias adds b_Qᵀ W_K x_j to every logit, which depends on the key, and value
  and output biases add a constant to every output row: neither is of the
  form F).  The key bias may be anything: it adds q·b_K, the same to every
  logit of a row, which softmax ignores.

Every (d, m) PyTorch accepts works (m divides d); each head then has rank
d/m, so with m = d the heads are rank one.  mhalearn's learners fit
full-rank Θ_i and W_i; a rank-deficient teacher is inside their model
class, so learning it back is a fair test (see the README).
"""

from __future__ import annotations

import functools

import numpy as np

from .._validation import check_optional_dependencies


def _torch(purpose: str):
    """The ``torch`` module; ``MissingDependencyError`` naming ``purpose`` and the extra when it is missing."""
    check_optional_dependencies(purpose, "torch", "torch")
    import torch

    return torch


@functools.lru_cache(maxsize=1)
def torch_module_class():
    """The ``torch.nn.Module`` class of :func:`to_torch` (defined when torch is first needed)."""
    torch = _torch("torch_module_class")

    class TorchMultiHeadAttention(torch.nn.Module):
        """F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i with Θ (``thetas``) and W (``ws``) as parameters, shape (m, d, d).

        ``forward(X)`` takes X of shape (..., k, d) (any leading batch
        dimensions) and returns the same shape.
        """

        def __init__(self, thetas, ws):
            super().__init__()
            self.thetas = torch.nn.Parameter(torch.as_tensor(np.asarray(thetas), dtype=torch.float64).clone())
            self.ws = torch.nn.Parameter(torch.as_tensor(np.asarray(ws), dtype=torch.float64).clone())

        def forward(self, X):
            X = X.to(self.thetas.dtype)
            logits = torch.einsum("...ka,hab,...lb->...hkl", X, self.thetas, X)
            attention = torch.softmax(logits, dim=-1)
            return torch.einsum("...hkl,...lb,hbc->...kc", attention, X, self.ws)

        def extra_repr(self) -> str:
            return f"heads={self.thetas.shape[0]}, dim={self.thetas.shape[1]}"

    return TorchMultiHeadAttention


def to_torch(model):
    """``model`` as a float64 ``torch.nn.Module`` with Θ and W as parameters (see the module docstring)."""
    _torch("MultiHeadAttention.to_torch")
    return torch_module_class()(model.thetas, model.ws)


def parameters_from_torch(module) -> tuple[np.ndarray, np.ndarray]:
    """(Θ, W), each (m, d, d), of a module of :func:`to_torch` or a ``torch.nn.MultiheadAttention``.

    :meth:`MultiHeadAttention.from_torch <mhalearn.MultiHeadAttention.from_torch>`
    builds the layer from them.  For ``torch.nn.MultiheadAttention`` the
    conditions and the mapping are in the module docstring; a module that
    breaks them raises ``ValueError`` saying which.
    """
    torch = _torch("MultiHeadAttention.from_torch")
    if isinstance(module, torch_module_class()):
        return module.thetas.detach().cpu().numpy(), module.ws.detach().cpu().numpy()
    if isinstance(module, torch.nn.MultiheadAttention):
        return _from_multihead_attention(module)
    raise TypeError(f"module: expected a module made by to_torch or a torch.nn.MultiheadAttention, "
                    f"received {type(module).__name__}")


def _from_multihead_attention(module) -> tuple[np.ndarray, np.ndarray]:
    if not module._qkv_same_embed_dim:
        raise ValueError("module: expected kdim = vdim = embed_dim (one packed in_proj_weight), received "
                         f"kdim={module.kdim}, vdim={module.vdim}, embed_dim={module.embed_dim}")
    if module.bias_k is not None or module.bias_v is not None or module.add_zero_attn:
        raise ValueError("module: expected add_bias_kv=False and add_zero_attn=False (they add a token that is "
                         "not in X)")
    d, m = module.embed_dim, module.num_heads
    d_head = d // m
    weight = module.in_proj_weight.detach().to("cpu", dtype=module.in_proj_weight.dtype).double().numpy()
    query, key, value = weight[:d], weight[d:2 * d], weight[2 * d:]
    out = module.out_proj.weight.detach().cpu().double().numpy()
    if module.in_proj_bias is not None:
        bias = module.in_proj_bias.detach().cpu().double().numpy()
        for name, part in (("query", bias[:d]), ("value", bias[2 * d:])):
            if np.any(part != 0):
                raise ValueError(f"module: expected a zero {name} bias in in_proj_bias (it is not of the form "
                                 f"F(X) = Σ softmax(XΘXᵀ)XW), received max |b| = {np.max(np.abs(part)):.3g}")
    if module.out_proj.bias is not None and np.any(module.out_proj.bias.detach().cpu().numpy() != 0):
        raise ValueError("module: expected a zero out_proj.bias (a constant added to every output is not of "
                         "the form F(X) = Σ softmax(XΘXᵀ)XW)")
    heads = [slice(h * d_head, (h + 1) * d_head) for h in range(m)]
    thetas = np.stack([query[rows].T @ key[rows] / np.sqrt(d_head) for rows in heads])
    ws = np.stack([value[rows].T @ out[:, rows].T for rows in heads])
    return thetas, ws


def _check_float64(jax) -> None:
    """Raise ``RuntimeError`` unless JAX computes in float64 (see the module docstring)."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError("jax_enable_x64: expected JAX to compute in float64 as MultiHeadAttention does, "
                           "received jax_enable_x64 = False (float32, eight digits lost); run "
                           'jax.config.update("jax_enable_x64", True) at start-up (or set the environment '
                           "variable JAX_ENABLE_X64=1)")


def to_jax(model):
    """``(apply, params)``: the pure function ``apply(params, X)`` = F(X) and ``params = {"thetas", "ws"}``.

    ``apply`` is jit-compiled and differentiable with ``jax.grad``; X has
    shape (..., k, d).  Everything is float64: both this function and
    ``apply`` raise ``RuntimeError`` while ``jax_enable_x64`` is off (see
    the module docstring).
    """
    check_optional_dependencies("MultiHeadAttention.to_jax", "jax", "jax")
    import jax
    import jax.numpy as jnp

    _check_float64(jax)

    @jax.jit
    def apply(params, X):
        # Runs when jit traces, and jit traces again whenever jax_enable_x64 changes.
        _check_float64(jax)
        logits = jnp.einsum("...ka,hab,...lb->...hkl", X, params["thetas"], X)
        attention = jax.nn.softmax(logits, axis=-1)
        return jnp.einsum("...hkl,...lb,hbc->...kc", attention, X, params["ws"])

    return apply, {"thetas": jnp.asarray(model.thetas), "ws": jnp.asarray(model.ws)}
