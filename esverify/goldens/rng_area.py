"""The `rng` golden area: vectors pinning the RNG contract (docs/CONTRACT.md §2-§4).

Expected values always come from the slow scalar reference
(`esverify.rng.scalar`, libm64 from Python's `math`); `recompute` asks one
backend of `esverify.rng` for the same fields. Vector kinds (inputs.kind):

- ``splitmix64-sequential``: the first n outputs of the sequential
  generator (expected) against the counter form `at(seed, 0..n-1)`
  (recomputed): the sequential/counter equivalence, with docs/CONTRACT.md §2's known
  answer as one vector.
- ``splitmix64-counter``: `at(seed, i)` at chosen u64 counters (wrap-around
  at 2**64-1, the 2**32 and 2**53 boundaries).
- ``member-seed``: docs/CONTRACT.md §4 member seeds; with ``antithetic`` true,
  members 2k and 2k+1 both get member_seed(..., 2k).
- ``stream-seed``: per-slot stream seeds under ``iid`` and ``correlated``.
- ``gaussian``: elements first .. first+n-1 of a stream, for both mappings;
  ``chunk_elements`` (null = the backend's default) is passed to the
  backend so that chunk boundaries really are crossed: the values must not
  depend on it.
- ``noise``: end to end, (seed, iteration, population, member, scheme,
  slot sizes) -> the noise of every slot (under ``correlated`` equal-size
  slots repeat one stream).
- ``gaussian-digest`` and ``noise-digest``: long streams (2**20
  values each) carried as a SHA-256 of their bits and a count, not as
  values (`esverify.goldens.digest`): gaussian ranges over several seeds,
  odd starts, counters crossing 2**32 and ending at 2**64, and the noise of
  several members over 24 slots (every slot derivation of a scheme). A
  differing digest is located (`locate`): the first differing element,
  both values and the ulp distance.

Backends: ``numpy``, ``numba``, ``torch-cpu`` and, when CUDA is
available, ``torch-cuda``. Counter access (`at`) has numpy-array and
torch-tensor forms; the ``numba`` backend recomputes it with the
Python-int form of `esverify.rng.at` (numba has no separate `at`). Seed
derivation is scalar u64 arithmetic, identical on every backend.
"""
from __future__ import annotations

import collections
import functools
import json

import numpy as np

from .. import bits
from ..rng import CONTRACT_VERSION
from ..rng import scalar
from . import digest
from .area import Area
from .compare import encode, encode_ints, libm_allowance

U64 = (1 << 64) - 1
SEEDS = (0, U64, 1234567, 0x0123456789ABCDEF)

def h64(x: int) -> str:
    """A u64 input as docs/CONTRACT.md §5 writes it; ValueError outside [0, 2**64) (never wrapped)."""
    return bits.to_hex(x, "u64")


def _vector(id_, comment, inputs, expected) -> dict:
    return {"id": id_, "comment": comment, "inputs": inputs, "expected": expected}


def _seed_name(seed: int) -> str:
    return {0: "0", U64: "max"}.get(seed, f"{seed:x}")


def _splitmix_vectors() -> list[dict]:
    out = [_vector("splitmix64-sequential-known-answer", "docs/CONTRACT.md §2 known answer: the sequential generator "
                   "seeded with 1234567; recomputed by counter, at(seed, i) for i = 0..4",
                   {"kind": "splitmix64-sequential", "seed": h64(1234567), "n": 5},
                   {"outputs": encode_ints(scalar.sequential(1234567, 5), "u64")})]
    for seed, n in ((0, 64), (U64, 64), (0x0123456789ABCDEF, 17)):
        out.append(_vector(f"splitmix64-sequential-seed-{_seed_name(seed)}",
                           f"sequential splitmix64 outputs 0..{n - 1} equal the counter form at(seed, i)",
                           {"kind": "splitmix64-sequential", "seed": h64(seed), "n": n},
                           {"outputs": encode_ints(scalar.sequential(seed, n), "u64")}))
    indices = [0, 1, 2, 3, 2**31 - 1, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, U64 - 1, U64]
    for seed in (0, U64, 1234567):
        out.append(_vector(f"splitmix64-counter-seed-{_seed_name(seed)}",
                           "at(seed, i) at u64 counters crossing 2**32, 2**53 and 2**63; at i = 2**64-1 the "
                           "counter (i + 1) * GAMMA wraps to 0, so the output is mix(seed)",
                           {"kind": "splitmix64-counter", "seed": h64(seed), "indices": [h64(i) for i in indices]},
                           {"outputs": encode_ints([scalar.at(seed, i) for i in indices], "u64")}))
    return out


def _member(member: int, antithetic: bool) -> int:
    return member - member % 2 if antithetic else member


def _member_seed_vectors() -> list[dict]:
    cases = [("seed-0-iter-0", 0, 0, 8, list(range(8)), False),
             ("seed-max-iter-3", U64, 3, 6, list(range(6)), False),
             ("seed-1234567-iter-1000", 1234567, 1000, 64, [0, 1, 31, 62, 63], False),
             ("counter-wraps", 42, 2**52, 2**12, [0, 1, 4095], False),
             ("antithetic-seed-1234567-iter-2", 1234567, 2, 8, list(range(8)), True),
             ("antithetic-seed-max-iter-0", U64, 0, 4, list(range(4)), True)]
    out = []
    for name, seed, iteration, population, members, antithetic in cases:
        comment = (f"member_seed(seed, {iteration}, {population}, m) = at(seed ^ SEED_DOMAIN, "
                   f"iteration * population + m), u64 wrapping")
        if antithetic:
            comment += "; antithetic: members 2k and 2k+1 share member_seed(..., 2k) (2k+1 negates the noise)"
        if name == "counter-wraps":
            comment += "; here iteration * population = 2**64 wraps to 0"
        seeds = [scalar.member_seed(seed, iteration, population, _member(m, antithetic)) for m in members]
        out.append(_vector(f"member-seed-{name}", comment,
                           {"kind": "member-seed", "seed": h64(seed), "iteration": iteration,
                            "population": population, "members": members, "antithetic": antithetic},
                           {"member_seeds": encode_ints(seeds, "u64")}))
    return out


def _stream_seed_vectors() -> list[dict]:
    ms = scalar.member_seed(1234567, 5, 16, 3)
    out = []
    for label, member_seed in (("0", 0), ("max", U64), ("of-1234567-5-16-3", ms)):
        for scheme in ("iid", "correlated"):
            slots = [0, 1, 2, 7, 1000]
            comment = ("iid: stream seed of slot s = at(member_seed ^ NOISE_DOMAIN, s)" if scheme == "iid" else
                       "correlated: every slot reuses the member seed (tensors restart one stream)")
            out.append(_vector(f"stream-seed-{scheme}-member-{label}", comment,
                               {"kind": "stream-seed", "member_seed": h64(member_seed), "scheme": scheme,
                                "slots": slots},
                               {"stream_seeds": encode_ints([scalar.stream_seed(member_seed, s, scheme)
                                                             for s in slots], "u64")}))
    return out


def _f32_bits(values: list[float]) -> dict:
    return encode(np.array(values, dtype=np.float32))


def _gaussian_vectors() -> list[dict]:
    cases = []
    for seed in SEEDS:
        cases.append((f"seed-{_seed_name(seed)}-first-0-n-64", seed, 0, 64, None, "the first 64 elements"))
    cases += [
        ("seed-1234567-first-1-n-33", 1234567, 1, 33, None, "odd start: element 1 is the sine half of pair 0"),
        ("seed-1234567-first-1-n-1", 1234567, 1, 1, None, "a single odd element"),
        ("seed-1234567-first-0-n-0", 1234567, 0, 0, None, "an empty range"),
        ("seed-7-first-2p32m3-n-8", 7, 2**32 - 3, 8, None, "counters crossing 2**32"),
        ("seed-7-first-2p40p1-n-5", 7, 2**40 + 1, 5, None, "a far odd start"),
        ("seed-max-first-5-n-1000-chunk-64", U64, 5, 1000, 64,
         "odd start, 16 chunk boundaries of 64 elements, each splitting a Box-Muller pair"),
        ("seed-99-first-3-n-50-chunk-7", 99, 3, 50, 7, "odd chunks of 7 elements from an odd start"),
        ("seed-99-first-0-n-2053-chunk-256", 99, 0, 2053, 256, "8 chunk boundaries and an odd tail"),
    ]
    out = []
    for mapping in ("poly32", "libm64"):
        fn = scalar.MAPPINGS[mapping]
        for name, seed, first, n, chunk, why in cases:
            comment = (f"{mapping} gaussian elements {first}..{first + n - 1} of seed {h64(seed)}: {why}"
                       + ("" if chunk is None else f"; recomputed with chunk_elements={chunk}, the values must "
                          "not depend on it"))
            if mapping == "libm64":
                comment += "; libm class: backends may differ by one f32 ulp (libm-divergence)"
            out.append(_vector(f"gaussian-{mapping}-{name}", comment,
                               {"kind": "gaussian", "seed": h64(seed), "first": first, "n": n,
                                "mapping": mapping, "chunk_elements": chunk},
                               {"values": _f32_bits([fn(seed, j) for j in range(first, first + n)])}))
    return out


def _noise_vectors() -> list[dict]:
    out = []
    sizes = [6, 6, 3, 1]
    for scheme in ("iid", "correlated"):
        for mapping in ("poly32", "libm64"):
            seed, iteration, population, member = 2026, 4, 10, 7
            ms = scalar.member_seed(seed, iteration, population, _member(member, True))
            expected = {}
            for slot, size in enumerate(sizes):
                ss = scalar.stream_seed(ms, slot, scheme)
                expected[f"slot_{slot}"] = _f32_bits(scalar.gaussian(ss, size, 0, mapping))
            comment = (f"noise of antithetic member 7 (uses member 6's seed; the trainer negates it) at "
                       f"iteration {iteration}, population {population}, slots of sizes {sizes}, {scheme}")
            if scheme == "correlated":
                comment += ": slots 0 and 1 are identical, slots 2 and 3 are prefixes of them"
            out.append(_vector(f"noise-{scheme}-{mapping}-antithetic-member-7", comment,
                               {"kind": "noise", "seed": h64(seed), "iteration": iteration,
                                "population": population, "member": member, "antithetic": True,
                                "scheme": scheme, "mapping": mapping, "slot_sizes": sizes},
                               expected))
    return out


#: values per long-stream digest vector (docs/goldens.md: at least 2**20)
DIGEST_VALUES = 1 << 20
#: a digest vector asking for more values than this is refused before computing (a hostile count)
MAX_DIGEST_VALUES = 1 << 24
#: the noise digest's slot sizes: odd and tiny sizes, 16 equal slots (correlated repeats one stream),
#: and a long tail, 2**18 values per member
_DIGEST_SLOTS = [1, 2, 3, 5, 7, 64, 1000] + [4096] * 16 + [(1 << 18) - 1082 - 16 * 4096]
_DIGEST_MEMBERS = [0, 7, 998, 999]


def _gaussian_digest_ranges() -> list[tuple[int, int, int]]:
    q = DIGEST_VALUES // 4
    return [(0, 0, q), (U64, 1, q), (0x0123456789ABCDEF, 2**32 - q // 2 - 1, q), (1234567, 2**64 - q, q)]


def ranges_of(x: dict, member_seed=None, stream_seed=None) -> list[tuple[int, int, int]]:
    """The (seed, first, n) ranges a digest vector's stream concatenates (esverify.goldens.digest).

    member_seed, stream_seed: the derivations to use for noise-digest (default the scalar reference's);
    an implementation under test passes its own.
    """
    if x["kind"] == "gaussian-digest":
        return [(int(r["seed"], 16), int(r["first"], 16), r["n"]) for r in x["ranges"]]
    member_seed = member_seed or (lambda m: scalar.member_seed(int(x["seed"], 16), x["iteration"],
                                                               x["population"], _member(m, x["antithetic"])))
    stream_seed = stream_seed or (lambda ms, slots: [scalar.stream_seed(ms, s, x["scheme"]) for s in slots])
    out = []
    for m in x["members"]:
        seeds = stream_seed(member_seed(m), range(len(x["slot_sizes"])))
        out += [(int(seed), 0, size) for seed, size in zip(seeds, x["slot_sizes"])]
    return out


def _digest_vectors() -> list[dict]:
    out = []
    for mapping in ("poly32", "libm64"):
        x = {"kind": "gaussian-digest", "mapping": mapping,
             "ranges": [{"seed": h64(s), "first": h64(f), "n": n} for s, f, n in _gaussian_digest_ranges()]}
        comment = (f"{mapping}: {DIGEST_VALUES} gaussian values carried as SHA-256 of their f32 bits (little-endian) "
                   f"and the count: seeds 0, 2**64-1 (odd start), 0x0123456789abcdef across counter 2**32 and "
                   f"1234567 up to the last element 2**64-1; about 2**19 cosine and 2**19 sine halves, so a fault "
                   f"in one value of a thousand is met hundreds of times")
        out.append(_vector(f"gaussian-digest-{mapping}-2p20", comment, x, _digest_expected(x, mapping)))
    for scheme in ("iid", "correlated"):
        for mapping in ("poly32", "libm64"):
            x = {"kind": "noise-digest", "seed": h64(2026), "iteration": 2**33 + 5, "population": 1000,
                 "members": _DIGEST_MEMBERS, "antithetic": True, "scheme": scheme, "mapping": mapping,
                 "slot_sizes": _DIGEST_SLOTS}
            comment = (f"{scheme} noise, {mapping}: members {_DIGEST_MEMBERS} (antithetic: 7 uses 6's seed, 999 "
                       f"998's) at iteration 2**33+5 of population 1000 (the member counter passes 2**42), "
                       f"{len(_DIGEST_SLOTS)} slots of sizes {_DIGEST_SLOTS[:7]} + 16 x 4096 + a tail: "
                       f"{DIGEST_VALUES} values as SHA-256 and count")
            out.append(_vector(f"noise-digest-{scheme}-{mapping}-2p20", comment, x, _digest_expected(x, mapping)))
    return out


def _digest_expected(x: dict, mapping: str) -> dict:
    # the scalar reference takes about 7 s of pure Python per 2**20 poly32 values; a second generate in the same
    # process (the tests, a script) reuses the answer, which depends on nothing but x and mapping
    return json.loads(_digest_of(json.dumps(x, sort_keys=True), mapping))


@functools.lru_cache(maxsize=None)
def _digest_of(x_json: str, mapping: str) -> str:
    # element j of a stream is a function of (seed, j) alone, so ranges that start one seed's stream are
    # prefixes of the longest of them, computed once: the correlated scheme's slots all start their member's
    # stream, and an antithetic pair's members share a seed (a third of the noise digests' values)
    ranges = ranges_of(json.loads(x_json))
    starts = collections.Counter(seed for seed, first, _ in ranges if first == 0)
    longest: dict[int, int] = {}
    for seed, first, n in ranges:
        if first == 0 and starts[seed] > 1:
            longest[seed] = max(longest.get(seed, 0), n)
    held: dict[int, list[float]] = {}
    h = digest.Hasher()
    for seed, first, n in ranges:
        if first == 0 and seed in longest:
            if seed not in held:
                held[seed] = scalar.gaussian(seed, longest[seed], 0, mapping)
            values = held[seed][:n]
        else:
            values = scalar.gaussian(seed, n, first, mapping)
        h.update(np.array(values, dtype=np.float32))
    return json.dumps(h.fields())


def generate() -> list[dict]:
    """Every rng vector, expected values from esverify.rng.scalar (deterministic order)."""
    return (_splitmix_vectors() + _member_seed_vectors() + _stream_seed_vectors()
            + _gaussian_vectors() + _noise_vectors() + _digest_vectors())


def backends() -> list[str]:
    """The labels of `esverify.rng.backend_targets()`: numpy, numba, torch-cpu (+ torch-cuda)."""
    from ..rng import backend_targets
    return [label for label, _, _ in backend_targets()]


def _spec(backend: str) -> tuple[str, str | None]:
    from ..rng import backend_targets
    targets = {label: (name, device) for label, name, device in backend_targets()}
    if backend not in targets:
        raise ValueError(f"rng backend {backend!r} is unknown or not available here; available: {sorted(targets)}")
    return targets[backend]


def _at_many(seed: int, indices: list[int], backend: str) -> dict:
    from .. import rng
    name, device = _spec(backend)
    if name == "numpy":
        return encode(rng.at(seed, np.array(indices, dtype=np.uint64)))
    if name == "torch":
        import torch
        signed = [i - (1 << 64) if i >> 63 else i for i in indices]
        return encode(rng.at(seed, torch.tensor(signed, dtype=torch.int64, device=device)))
    return encode_ints([rng.at(seed, int(i)) for i in indices], "u64")


def _gaussian(seed: int, n: int, first: int, mapping: str, backend: str, chunk) -> dict:
    from .. import rng
    name, device = _spec(backend)
    values = rng.gaussian(seed, n, first, mapping, device, backend=name, chunk_elements=chunk)
    return encode(values)


#: kind -> (the input giving the count or the list whose length is the count, the expected field)
_SIZED = {"splitmix64-sequential": ("n", "outputs"), "splitmix64-counter": ("indices", "outputs"),
          "member-seed": ("members", "member_seeds"), "stream-seed": ("slots", "stream_seeds"),
          "gaussian": ("n", "values")}


def check_sizes(vector: dict) -> list[str]:
    """Sizes the vector declares (n, index lists, slot sizes) that disagree with its expected values.

    Lengths only: a hostile vector asking for n = 2e7 values where 5 are expected is refused before
    any backend computes.
    """
    x, exp = vector["inputs"], vector["expected"]
    kind = x.get("kind")
    if kind in ("gaussian-digest", "noise-digest"):
        if set(exp) != set(digest.FIELDS) or len(exp["sha256"]["values"]) != 4 or len(exp["count"]["values"]) != 1:
            return [f"expected fields must be sha256 (4 u64 words) and count (1 u64), got {sorted(exp)}"]
        declared = (sum(r["n"] for r in x["ranges"]) if kind == "gaussian-digest"
                    else len(x["members"]) * sum(x["slot_sizes"]))
        if declared > MAX_DIGEST_VALUES:
            return [f"asks for {declared} values, over the {MAX_DIGEST_VALUES} a digest vector may hold"]
        count = digest.count_of(vector)
        return [] if declared == count else [f"its ranges hold {declared} values, count is {count}"]
    if kind == "noise":
        sizes = x["slot_sizes"]
        want = {f"slot_{k}": size for k, size in enumerate(sizes)}
        if set(exp) != set(want):
            return [f"expected fields {sorted(exp)}, the slot sizes need {sorted(want)}"]
        return [f"{f} has {len(exp[f]['values'])} values, its slot size is {n}"
                for f, n in want.items() if len(exp[f]["values"]) != n]
    if kind not in _SIZED:
        return [f"unknown kind {kind!r}"]
    source, field = _SIZED[kind]
    declared = x[source] if source == "n" else len(x[source])
    if field not in exp:
        return [f"no expected field {field!r}"]
    got = len(exp[field]["values"])
    return [] if declared == got else [f"{source} asks for {declared} values, {field} has {got}"]


def recompute(vector: dict, backend: str) -> dict:
    """The expected fields of `vector` recomputed by `backend` (a name from `backends()`)."""
    from .. import rng
    x = vector["inputs"]
    kind = x["kind"]
    problems = check_sizes(vector)
    if problems:
        raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
    if kind == "splitmix64-sequential":
        return {"outputs": _at_many(int(x["seed"], 16), list(range(x["n"])), backend)}
    if kind == "splitmix64-counter":
        return {"outputs": _at_many(int(x["seed"], 16), [int(i, 16) for i in x["indices"]], backend)}
    if kind == "member-seed":
        _spec(backend)
        seeds = [rng.member_seed(int(x["seed"], 16), x["iteration"], x["population"],
                                 _member(m, x["antithetic"])) for m in x["members"]]
        return {"member_seeds": encode_ints(seeds, "u64")}
    if kind == "stream-seed":
        _spec(backend)
        return {"stream_seeds": encode_ints([rng.stream_seed(int(x["member_seed"], 16), s, x["scheme"])
                                             for s in x["slots"]], "u64")}
    if kind == "gaussian":
        return {"values": _gaussian(int(x["seed"], 16), x["n"], x["first"], x["mapping"], backend,
                                    x["chunk_elements"])}
    if kind in ("gaussian-digest", "noise-digest"):
        h = digest.Hasher()
        for seed, first, n in _backend_ranges(x):
            h.update(_gaussian_values(seed, n, first, x["mapping"], backend))
        return h.fields()
    if kind == "noise":
        ms = rng.member_seed(int(x["seed"], 16), x["iteration"], x["population"],
                             _member(x["member"], x["antithetic"]))
        return {f"slot_{slot}": _gaussian(rng.stream_seed(ms, slot, x["scheme"]), size, 0, x["mapping"],
                                          backend, None)
                for slot, size in enumerate(x["slot_sizes"])}
    raise ValueError(f"vector {vector['id']!r} has unknown kind {kind!r}")


def _backend_ranges(x: dict) -> list[tuple[int, int, int]]:
    from .. import rng
    return ranges_of(x, lambda m: rng.member_seed(int(x["seed"], 16), x["iteration"], x["population"],
                                                  _member(m, x["antithetic"])),
                     lambda ms, slots: [rng.stream_seed(ms, s, x["scheme"]) for s in slots])


def _gaussian_values(seed: int, n: int, first: int, mapping: str, backend: str) -> np.ndarray:
    from .. import rng
    name, device = _spec(backend)
    values = rng.gaussian(seed, n, first, mapping, device, backend=name)
    return values.cpu().numpy() if hasattr(values, "cpu") else np.asarray(values)


def locate(vector: dict, backend: str, got: dict) -> list[dict] | None:
    """Rows naming the first values where `backend`'s stream differs (esverify.goldens.digest.locate)."""
    if not digest.is_digest(vector):
        return None
    x = vector["inputs"]
    mine = _backend_ranges(x)

    def fetch(lo, hi):
        parts = [_gaussian_values(s, n, f, x["mapping"], backend) for s, f, n in digest.split(mine, lo, hi)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    limit = libm_allowance(digest.count_of(vector)) + 1
    found, requests = digest.locate(fetch, ranges_of(x), x["mapping"], limit)
    return digest.rows("rng", backend, vector, ranges_of(x), found, requests, got)


AREA = Area(name="rng", version=CONTRACT_VERSION, version_constant="esverify.rng.CONTRACT_VERSION",
            generate=generate, backends=backends, recompute=recompute, check_sizes=check_sizes,
            locate=locate)
