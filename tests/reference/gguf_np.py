"""Minimal GGUF v3 reader (numpy), enough for the float oracle files.

Reads all metadata keys and the tensor directory; tensor data of type F32,
F16 or BF16 is returned as numpy arrays (quantized types are refused).

GGUF lists dimensions fastest-varying first, so a tensor with GGUF dims
{ne0, ne1, ne2} is the C-order numpy array of shape (ne2, ne1, ne0).  For
example `token_embd` {E, V} becomes [V, E] and `ffn_gate_exps` {E, F, n_expert}
becomes [n_expert, F, E] -- which is exactly the Hugging Face [out, in] layout.
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"

# Metadata value types (gguf_type).
_SCALAR_FORMATS = {
    0: "<B",   # UINT8
    1: "<b",   # INT8
    2: "<H",   # UINT16
    3: "<h",   # INT16
    4: "<I",   # UINT32
    5: "<i",   # INT32
    6: "<f",   # FLOAT32
    7: "<?",   # BOOL
    10: "<Q",  # UINT64
    11: "<q",  # INT64
    12: "<d",  # FLOAT64
}
_TYPE_STRING = 8
_TYPE_ARRAY = 9

# ggml tensor types that this reader can decode.
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30


class GGUFFile:
    """Parsed GGUF file: `.metadata` (dict key -> value), `.tensors`
    (dict name -> (ggml_type, numpy shape, absolute byte offset))."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self._buf = f.read()
        self._pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.version = self._unpack("<I")
        if self.version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = self._unpack("<Q")
        n_kv = self._unpack("<Q")

        self.metadata = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._unpack("<I"))

        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._unpack("<I")
            dims = [self._unpack("<Q") for _ in range(n_dims)]
            ggml_type = self._unpack("<I")
            offset = self._unpack("<Q")
            infos.append((name, ggml_type, tuple(reversed(dims)), offset))

        alignment = int(self.metadata.get("general.alignment", 32))
        data_start = -(-self._pos // alignment) * alignment
        self.tensors = {name: (t, shape, data_start + off) for name, t, shape, off in infos}

    # -- low-level parsing -------------------------------------------------
    def _take(self, n):
        b = self._buf[self._pos:self._pos + n]
        if len(b) != n:
            raise ValueError(f"{self.path}: truncated file")
        self._pos += n
        return b

    def _unpack(self, fmt):
        (v,) = struct.unpack(fmt, self._take(struct.calcsize(fmt)))
        return v

    def _string(self):
        return self._take(self._unpack("<Q")).decode("utf-8")

    def _value(self, vtype):
        if vtype in _SCALAR_FORMATS:
            return self._unpack(_SCALAR_FORMATS[vtype])
        if vtype == _TYPE_STRING:
            return self._string()
        if vtype == _TYPE_ARRAY:
            item_type = self._unpack("<I")
            n = self._unpack("<Q")
            return [self._value(item_type) for _ in range(n)]
        raise ValueError(f"{self.path}: unknown metadata type {vtype}")

    # -- tensor access -----------------------------------------------------
    def tensor(self, name):
        """Return tensor `name` as a numpy array (F32 / F16 / BF16 -> float32)."""
        ggml_type, shape, offset = self.tensors[name]
        count = int(np.prod(shape, dtype=np.int64))
        if ggml_type == GGML_TYPE_F32:
            a = np.frombuffer(self._buf, dtype="<f4", count=count, offset=offset)
        elif ggml_type == GGML_TYPE_F16:
            a = np.frombuffer(self._buf, dtype="<f2", count=count, offset=offset).astype(np.float32)
        elif ggml_type == GGML_TYPE_BF16:
            raw = np.frombuffer(self._buf, dtype="<u2", count=count, offset=offset)
            a = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: ggml type {ggml_type} is quantized; only F32/F16/BF16 are supported")
        return a.reshape(shape)

    def raw(self, name, nbytes):
        """The first `nbytes` bytes of tensor `name` (for block formats decoded elsewhere)."""
        offset = self.tensors[name][2]
        return self._buf[offset:offset + nbytes]

    def has(self, name):
        return name in self.tensors
