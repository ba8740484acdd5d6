"""The driver's adapter tape file: many small named arrays in one .npz of a few members.

Each es_step's tape names every member's adapters `m<m>.l<l>.A|B|BA` (raw bit patterns, docs/references.md
"EGGROLL"): population x weights x 3 arrays of a few dozen elements. One .npz member per array cost both
sides more than the bits: the child wrote a zip entry and an .npy header per array, and the parent's
np.load parsed every header with `ast.literal_eval` (under esverify.pyast's lock, which the reference
threads share). Here the arrays of each dtype are concatenated into one member, with an index of names,
offsets and shapes:

- `index_keys` (str, n): the arrays' names, in the order `write` was given them;
- `index_kinds` (int64, n): which `data<k>` member holds each array's elements;
- `index_offsets` (int64, n): where they start in it (elements, C order);
- `index_ndims` (int64, n) and `index_dims` (int64, sum of ndims): each array's shape;
- `data<k>` (1-D, one per distinct dtype, in order of first appearance): the elements.

`read` gives back {name: array} with each array's dtype, shape and elements as written (views of the
`data<k>` arrays).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

INDEX = ("index_keys", "index_kinds", "index_offsets", "index_ndims", "index_dims")


def write(path, arrays: dict) -> Path:
    """Write {name: numpy array} (any dtypes in native byte order, any shapes; names unique, as str) to `path`
    (.npz, uncompressed) in the layout above; returns the path. ValueError for a name ending in NUL (numpy's
    str arrays drop trailing NULs: it would read back as another name) or an array in the other byte order
    (its dtype would not read back as written)."""
    path = Path(path)
    kinds: dict = {}
    chunks, filled = [], []   # per data member: its arrays, raveled, and their element count so far
    keys, kind_of, offsets, ndims, dims = [], [], [], [], []
    for key, value in arrays.items():
        value = np.asarray(value)
        if str(key).endswith("\x00"):
            raise ValueError(f"{path}: array name {str(key)!r} ends in NUL, which the index cannot hold")
        if not value.dtype.isnative:
            raise ValueError(f"{path}: array {key!r} is {value.dtype.str}, not in native byte order")
        k = kinds.setdefault(value.dtype, len(kinds))
        if k == len(chunks):
            chunks.append([])
            filled.append(0)
        keys.append(str(key))
        kind_of.append(k)
        offsets.append(filled[k])
        ndims.append(value.ndim)
        dims.extend(value.shape)
        chunks[k].append(value.reshape(-1))
        filled[k] += value.size
    data = {f"data{k}": np.concatenate(c) for k, c in enumerate(chunks)}
    np.savez(path, index_keys=np.array(keys, dtype=str), index_kinds=np.array(kind_of, dtype=np.int64),
             index_offsets=np.array(offsets, dtype=np.int64), index_ndims=np.array(ndims, dtype=np.int64),
             index_dims=np.array(dims, dtype=np.int64), **data)
    return path


def read(path) -> dict:
    """{name: array} of a file `write` wrote. Raises ValueError naming the file and what is wrong when the
    index is missing or does not fit the data (a member absent, lengths that disagree, an index member not
    of integers, an array reaching past its data, two arrays on the same elements or elements no array
    reads, a name twice), and what np.load raises on a file that is no .npz (OSError,
    zipfile.BadZipFile, ValueError)."""
    from ... import pyast   # the parent's alone: the child, which writes, has no copy of it
    with pyast.exclusive(), np.load(path) as stored:   # numpy parses each header with ast (esverify.pyast)
        missing = [name for name in INDEX if name not in stored.files]
        if missing:
            raise ValueError(f"{path}: not an adapter tape file: no member {', '.join(missing)} (a tape of one "
                             "member per array, as drivers before the index wrote, has none)")
        keys, kinds, offsets, ndims, dims = (stored[name] for name in INDEX)
        data = []
        while f"data{len(data)}" in stored.files:
            data.append(stored[f"data{len(data)}"])
    return _unpack(path, keys, kinds, offsets, ndims, dims, data)


def _unpack(path, keys, kinds, offsets, ndims, dims, data) -> dict:
    def bad(what: str) -> ValueError:
        return ValueError(f"{path}: the adapter tape's index does not fit its data: {what}")

    n = len(keys) if keys.ndim == 1 else 0
    if any(a.ndim != 1 for a in (keys, kinds, offsets, ndims, dims)) or any(a.ndim != 1 for a in data):
        raise bad("an index or data member is not one-dimensional")
    if keys.dtype.kind != "U" or any(a.dtype.kind not in "iu" for a in (kinds, offsets, ndims, dims)):
        raise bad(f"names of dtype {keys.dtype} or an index member not of integers "
                  f"({', '.join(str(a.dtype) for a in (kinds, offsets, ndims, dims))})")
    if not (len(kinds) == len(offsets) == len(ndims) == n) or int(ndims.sum()) != len(dims):
        raise bad(f"{n} names, {len(kinds)} kinds, {len(offsets)} offsets, {len(ndims)} ranks, {len(dims)} dims")
    if len(set(keys.tolist())) != n:
        raise bad("a name appears twice")
    out, start, spans = {}, 0, []
    for key, k, offset, ndim in zip(keys.tolist(), kinds.tolist(), offsets.tolist(), ndims.tolist()):
        if ndim < 0:
            raise bad(f"{key} has rank {ndim}")
        shape = tuple(dims[start:start + ndim].tolist())
        start += ndim
        if not 0 <= k < len(data):
            raise bad(f"{key} is in data{k}, which the file lacks")
        if min(shape, default=0) < 0:
            raise bad(f"{key} has shape {shape}")
        size = math.prod(shape)   # Python ints: a product past int64 cannot wrap into range
        if offset < 0 or offset + size > len(data[k]):
            raise bad(f"{key} spans elements {offset}..{offset + size} of data{k}, which has {len(data[k])}")
        spans.append((k, offset, size, key))
        out[key] = data[k][offset:offset + size].reshape(shape)
    # `write` lays each data member's arrays end to end: any other tiling (two names reading the same
    # elements, elements no name reads) is not a file it wrote
    ends = [0] * len(data)
    for k, offset, size, key in sorted(spans, key=lambda s: s[:3]):   # an empty array first where two start
        if offset != ends[k]:
            raise bad(f"{key} starts at element {offset} of data{k}, where the arrays before it end at {ends[k]}")
        ends[k] = offset + size
    short = [f"data{k} has {len(d)} elements, its arrays {ends[k]}" for k, d in enumerate(data) if ends[k] != len(d)]
    if short:
        raise bad(short[0])
    return out
