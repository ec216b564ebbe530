"""The multi-head attention layer F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i ([design: object])."""

from __future__ import annotations

import os
import zipfile

import numpy as np
from scipy.optimize import linear_sum_assignment

from .._files import written_atomically
from .._memory import check_memory
from .._validation import check_inputs, check_instance, check_parameters, check_positive_int, check_predictor
from . import kernels

#: Version written into saved models; ``load`` refuses any other.
FORMAT_VERSION = 1
_FORMAT_TAG = "mhalearn.MultiHeadAttention"
#: The members of a model file and the dtype kinds each may have ("U" text, "i"/"u" integer, "f" float).
_MEMBERS = {"format.npy": "U", "version.npy": "iu", "thetas.npy": "f", "ws.npy": "f"}
#: Largest model file content ``load`` reads by default (declared, uncompressed): 1 GiB.
MAX_MODEL_BYTES = 1 << 30
#: Compression methods of zip members that :mod:`zipfile` reads.
_READABLE_COMPRESSION = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


def attention_scratch_bytes(heads: int, length: int, dim: int) -> int:
    """Bytes the kernels' workers hold at once for sequences of k = ``length`` tokens: each worker's
    scratch (the m·k × k attention weights and their gradient, the values and features: the kernels of
    :mod:`mhalearn.attention.kernels`), once per kernel thread."""
    import numba

    m, k, d = heads, length, dim
    per_worker = 2 * m * k * k + 3 * m * k * d + 3 * k * d + 2 * m * k
    return 8 * numba.get_num_threads() * per_worker


def check_attention_memory(heads: int, length: int, dim: int) -> None:
    """Refuse, before any work, sequences whose attention scratch (:func:`attention_scratch_bytes`)
    exceeds the memory budget (:func:`mhalearn.set_memory_budget`)."""
    check_memory(attention_scratch_bytes(heads, length, dim), "X",
                 f"the attention of {heads} head(s) over sequences of k = {length:,} tokens (an m·k × k scratch "
                 f"per kernel thread)", lower="k, the sequence length")


def _check_path(path, name: str = "path") -> str:
    """``path`` as a ``str`` file path, raising ``TypeError`` naming the argument for anything but str or PathLike."""
    check_instance(path, name, (str, os.PathLike), "a file path (str or os.PathLike)")
    return os.fspath(path)


class MultiHeadAttention:
    """A single multi-head attention layer with explicit parameters.

    Parameters
    ----------
    thetas : array of shape (m, d, d)
        Attention (query–key product) matrices Θ_i.
    ws : array of shape (m, d, d)
        Projection (value–output) matrices W_i.

    Attributes
    ----------
    heads : int
        Number of heads m.
    dim : int
        Token dimension d.

    Notes
    -----
    ``F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i`` with the softmax taken row-wise, for
    X of shape (k, d).  Parameters are identifiable up to the order of heads
    (Chen & Li, *Provably learning a multi-head attention layer*).
    """

    def __init__(self, thetas, ws):
        self.thetas, self.ws = check_parameters(thetas, ws)

    @property
    def heads(self) -> int:
        return self.thetas.shape[0]

    @property
    def dim(self) -> int:
        return self.thetas.shape[1]

    def __repr__(self) -> str:
        return f"MultiHeadAttention(heads={self.heads}, dim={self.dim})"

    def predict(self, X) -> np.ndarray:
        """Outputs F(X), shape (n, k, d), for inputs X of shape (n, k, d)."""
        X = check_inputs(X, self.dim)
        check_attention_memory(self.heads, X.shape[1], self.dim)
        return kernels.forward(X, self.thetas, self.ws)

    __call__ = predict

    def attention(self, X) -> np.ndarray:
        """Attention weights softmax(X Θ_i Xᵀ), shape (n, m, k, k)."""
        X = check_inputs(X, self.dim)
        return kernels.attention(X, self.thetas)

    @property
    def projection_sum(self) -> np.ndarray:
        """W_Σ = Σ_i W_i, the output map when every head attends alike."""
        return self.ws.sum(axis=0)

    def copy(self) -> "MultiHeadAttention":
        return MultiHeadAttention(self.thetas.copy(), self.ws.copy())

    # -------------------------------------------------------------- interop
    def to_torch(self):
        """This layer as a float64 ``torch.nn.Module`` (Θ, W as parameters); see :mod:`mhalearn.attention.interop`."""
        from .interop import to_torch

        return to_torch(self)

    @classmethod
    def from_torch(cls, module) -> "MultiHeadAttention":
        """A layer from :meth:`to_torch`'s module or a ``torch.nn.MultiheadAttention``.

        See :mod:`mhalearn.attention.interop`.
        """
        from .interop import parameters_from_torch

        return cls(*parameters_from_torch(module))

    def to_jax(self):
        """``(apply, params)``: a pure float64 JAX function and this layer's params (needs ``jax_enable_x64``)."""
        from .interop import to_jax

        return to_jax(self)

    # ------------------------------------------------------------------ I/O
    def save(self, path) -> None:
        """Write the parameters to an ``.npz`` file carrying a format version.

        The file is written whole under a temporary name and renamed into
        place (``mhalearn._files.written_atomically``), so ``path`` never
        holds a half-written model, even if the process is killed.  A symbolic
        link is followed; a path that is neither a regular file nor absent
        (a directory, a FIFO, a device) raises ``ValueError``.
        """
        path = _check_path(path)
        with written_atomically(path) as temporary, open(temporary, "wb") as handle:
            np.savez(handle, format=np.array(_FORMAT_TAG), version=np.array(FORMAT_VERSION),
                     thetas=self.thetas, ws=self.ws)

    @classmethod
    def load(cls, path, *, max_bytes: int = MAX_MODEL_BYTES) -> "MultiHeadAttention":
        """Read a model written by :meth:`save`; anything else raises ``ValueError``.

        ``path`` is a str or ``os.PathLike`` (else ``TypeError``).  The zip
        directory is checked before any member is read: exactly the members
        ``format``, ``version``, ``thetas`` and ``ws``, each a plain, not
        encrypted ``.npy`` array of the expected kind, compressed with a
        method :mod:`zipfile` reads, whose declared size matches its header,
        ``max_bytes`` (an integer >= 1) at most in all.  So a crafted file (extra
        members, a decompression bomb, a pickled object) is refused without
        being decompressed.  The version must be the integer
        :data:`FORMAT_VERSION`.
        """
        path = _check_path(path)
        max_bytes = check_positive_int(max_bytes, "max_bytes")
        if not os.path.isfile(path):
            raise ValueError(f"path: expected an existing model file, received {path!r}")
        try:
            with zipfile.ZipFile(path) as archive:
                contents = _read_model_members(archive, path, max_bytes)
        except (OSError, zipfile.BadZipFile, EOFError, ValueError) as error:
            message = str(error)
            if not message.startswith("path:"):
                message = f"path: expected an mhalearn model (.npz), could not read {path!r}: {message}"
            raise ValueError(message) from None
        if contents["format"].shape != () or str(contents["format"]) != _FORMAT_TAG:
            raise ValueError(f"path: expected an mhalearn model file, {path!r} lacks the format tag")
        version = contents["version"]
        if version.shape != () or int(version) != FORMAT_VERSION:
            raise ValueError(f"path: expected model format version {FORMAT_VERSION}, "
                             f"received version {version.tolist()!r}")
        return cls(contents["thetas"], contents["ws"])


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _read_model_members(archive: zipfile.ZipFile, path, max_bytes: int) -> dict[str, np.ndarray]:
    """The four arrays of a model file, after checking names, kinds and declared sizes."""
    infos = archive.infolist()
    names = [info.filename for info in infos]
    if sorted(names) != sorted(_MEMBERS):
        raise ValueError(f"path: expected an mhalearn model with members {sorted(_MEMBERS)}, "
                         f"{path!r} has {sorted(names)[:10]}")
    declared = sum(info.file_size for info in infos)
    if declared > max_bytes:
        raise ValueError(f"path: {path!r} declares {declared} bytes of content, more than max_bytes = {max_bytes}")
    contents = {}
    for info in infos:
        # zipfile itself raises RuntimeError and NotImplementedError for these.
        if info.flag_bits & 0x1:
            raise ValueError(f"path: member {info.filename} of {path!r} is encrypted; an mhalearn model is not")
        if info.compress_type not in _READABLE_COMPRESSION:
            raise ValueError(f"path: member {info.filename} of {path!r} is compressed with method "
                             f"{info.compress_type}, which zipfile cannot read")
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version not in _HEADER_READERS:
                raise ValueError(f"path: member {info.filename} of {path!r} has .npy version {version}")
            shape, fortran_order, dtype = _HEADER_READERS[version](member)
            header_bytes = member.tell()
            if dtype.hasobject or dtype.kind not in _MEMBERS[info.filename]:
                raise ValueError(f"path: member {info.filename} of {path!r} has dtype {dtype}, "
                                 f"expected kind {_MEMBERS[info.filename]!r}")
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if header_bytes + size != info.file_size:
                raise ValueError(f"path: member {info.filename} of {path!r} declares {info.file_size} bytes "
                                 f"but its array header needs {header_bytes + size}")
            data = member.read(size)
            if len(data) != size:
                raise ValueError(f"path: member {info.filename} of {path!r} is truncated")
            array = np.frombuffer(data, dtype=dtype)
            array = array.reshape(shape[::-1]).T if fortran_order else array.reshape(shape)
            contents[info.filename[:-len(".npy")]] = array
    return contents


# --------------------------------------------------------------------- metrics

def relative_error(model, reference, X) -> float:
    """Σ‖F̂(X) − F(X)‖² / Σ‖F(X)‖² of ``model`` against ``reference`` on inputs X.

    Either argument may be a ``MultiHeadAttention`` or any object with
    ``predict``.  A reference whose outputs on X are all zero makes the
    ratio undefined and raises ``ValueError``.
    """
    check_predictor(model, "model")
    check_predictor(reference, "reference")
    X = check_inputs(X)
    truth = reference.predict(X)
    estimate = model.predict(X)
    # Both sums in units of the largest output: squares of outputs near 1e-160 or 1e+160 would underflow
    # to 0 or overflow to inf, where the ratio itself is an ordinary number.
    unit = float(np.max(np.abs(truth)))
    if not unit > 0:
        raise ValueError("reference: expected outputs that are not all zero on X (the relative error divides by "
                         "Σ‖F(X)‖²), received a reference whose outputs are all zero")
    with np.errstate(over="ignore"):
        error = float(np.sum(((estimate - truth) / unit) ** 2) / np.sum((truth / unit) ** 2))
    if not np.isfinite(error):
        raise ValueError(f"model: expected finite outputs on X, the relative error is {error}")
    return error


def match_heads(model: MultiHeadAttention, reference: MultiHeadAttention) -> np.ndarray:
    """Permutation ``perm`` with model head ``perm[j]`` matched to reference head ``j``.

    The matching minimises Σ_j ‖Θ̂_perm[j] − Θ_j‖² + ‖Ŵ_perm[j] − W_j‖² (Hungarian
    assignment, :func:`scipy.optimize.linear_sum_assignment`).
    """
    check_instance(model, "model", MultiHeadAttention)
    check_instance(reference, "reference", MultiHeadAttention)
    if model.heads != reference.heads or model.dim != reference.dim:
        raise ValueError(
            f"model: expected {reference.heads} heads of dim {reference.dim} to match the reference, "
            f"received {model.heads} heads of dim {model.dim}"
        )
    cost = (
        ((reference.thetas[:, None] - model.thetas[None]) ** 2).sum(axis=(2, 3))
        + ((reference.ws[:, None] - model.ws[None]) ** 2).sum(axis=(2, 3))
    )
    rows, cols = linear_sum_assignment(cost)
    return cols[np.argsort(rows)]


def parameter_error(model: MultiHeadAttention, reference: MultiHeadAttention) -> dict:
    """Head-matched relative parameter errors.

    Returns a dict with ``theta`` = ‖Θ̂ − Θ‖_F/‖Θ‖_F and ``w`` = ‖Ŵ − W‖_F/‖W‖_F
    (over all heads, after the best matching), ``total`` for both stacked, and
    ``matching`` (the permutation from :func:`match_heads`).
    """
    perm = match_heads(model, reference)
    thetas, ws = model.thetas[perm], model.ws[perm]
    theta_err = np.linalg.norm(thetas - reference.thetas) / np.linalg.norm(reference.thetas)
    w_err = np.linalg.norm(ws - reference.ws) / np.linalg.norm(reference.ws)
    total = np.sqrt(
        (np.linalg.norm(thetas - reference.thetas) ** 2 + np.linalg.norm(ws - reference.ws) ** 2)
        / (np.linalg.norm(reference.thetas) ** 2 + np.linalg.norm(reference.ws) ** 2)
    )
    return {"theta": float(theta_err), "w": float(w_err), "total": float(total), "matching": perm.tolist()}


def head_collapse(model: MultiHeadAttention, reference: MultiHeadAttention) -> dict:
    """Signs that gradient descent merged heads instead of separating them.

    Returns ``head_cosine``, the largest cosine between two of the model's
    vec(Θ̂_i) (None for one head; near 1 when two heads sit on top of each
    other), and ``w_inflation`` = max_i ‖Ŵ_i‖_F / max_i ‖W_i‖_F (≫ 1 when
    merged heads imitate a missing one with large opposite projections).
    """
    check_instance(model, "model", MultiHeadAttention)
    check_instance(reference, "reference", MultiHeadAttention)
    w_inflation = float(np.max(np.linalg.norm(model.ws.reshape(model.heads, -1), axis=1))
                        / np.max(np.linalg.norm(reference.ws.reshape(reference.heads, -1), axis=1)))
    if model.heads < 2:
        return {"head_cosine": None, "w_inflation": w_inflation}
    flat = model.thetas.reshape(model.heads, -1)
    unit = flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), np.finfo(float).tiny)
    cosines = unit @ unit.T
    pairs = np.triu_indices(model.heads, k=1)
    return {"head_cosine": float(np.max(cosines[pairs])), "w_inflation": w_inflation}
