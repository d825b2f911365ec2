"""A minimal GGUF v3 writer (F32 or raw block tensors, scalar metadata) for tests: builds GGUF files
the way llama.cpp's converter lays them out, from numpy arrays."""
import collections
import struct

import numpy as np

# A tensor given as its GGML type id, numpy-order shape and the bytes of its blocks.
RawTensor = collections.namedtuple('RawTensor', 'ggml_type shape data')


def _string(s):
    b = s.encode('utf-8')
    return struct.pack('<Q', len(b)) + b


def _value(v):
    if isinstance(v, bool):
        return struct.pack('<I?', 7, v)
    if isinstance(v, int):
        return struct.pack('<II', 4, v)
    if isinstance(v, float):
        return struct.pack('<If', 6, v)
    if isinstance(v, str):
        return struct.pack('<I', 8) + _string(v)
    if isinstance(v, (list, tuple)):  # an array of strings, floats (f32) or ints (i32)
        if all(isinstance(x, str) for x in v):
            return struct.pack('<IIQ', 9, 8, len(v)) + b''.join(_string(x) for x in v)
        if any(isinstance(x, float) for x in v):
            return struct.pack('<IIQ', 9, 6, len(v)) + struct.pack(f'<{len(v)}f', *v)
        return struct.pack('<IIQ', 9, 5, len(v)) + struct.pack(f'<{len(v)}i', *v)
    raise TypeError(type(v))


def write_gguf(path, metadata, tensors, alignment=32):
    """metadata: {key: bool|int (uint32)|float (f32)|str|list of str, float or int}; tensors: {name: float32 ndarray | RawTensor}
    (C order; GGUF dims are the numpy shape reversed)."""
    out = bytearray(b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(metadata)))
    for k, v in metadata.items():
        out += _string(k) + _value(v)
    offset = 0
    blobs = []
    for name, a in tensors.items():
        if not isinstance(a, RawTensor):
            a = np.ascontiguousarray(a, dtype=np.float32)
            a = RawTensor(0, a.shape, a.tobytes())
        dims = list(reversed(a.shape))
        out += _string(name) + struct.pack('<I', len(dims)) + struct.pack(f'<{len(dims)}Q', *dims)
        out += struct.pack('<IQ', a.ggml_type, offset)  # offset in the data section
        blobs.append(bytes(a.data))
        offset += len(blobs[-1])
        pad = (alignment - offset % alignment) % alignment
        blobs[-1] += b'\0' * pad
        offset += pad
    out += b'\0' * ((alignment - len(out) % alignment) % alignment)
    with open(path, 'wb') as f:
        f.write(out)
        for b in blobs:
            f.write(b)
