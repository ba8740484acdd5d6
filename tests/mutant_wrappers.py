"""Python protocol wrappers with one planted fault each, for tests/test_goldens_mutants.py (run as a script).

`python tests/mutant_wrappers.py MODE` serves the clean-room RNG operations
(numpy backend: no torch, quick to start), `gaussian_ranges` included,
with the fault MODE names planted in every gaussian value it sends:

- ok: no fault;
- cos1000 / cos1500: the cosine half (even element j) one f32 ulp up where
  j = 0 mod 2000 / 3000 (one value in 1000 / 1500), as a porter's wrong branch
  for some input range would give;
- libmdown: libm64 values one ulp toward zero at every element j = 0 mod 4
  (a libm that rounds differently: systematic, not a platform's rare ulp).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from esverify.impl import server  # noqa: E402
from esverify.impl.wire import Tensor, parse_hex  # noqa: E402


def plant(mode: str, values: np.ndarray, first: int, mapping: str) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    j = np.arange(v.size, dtype=np.uint64) + np.uint64(first)
    if mode in ("cos1000", "cos1500"):
        hit = j % np.uint64(2000 if mode == "cos1000" else 3000) == 0
        v[hit] = np.nextafter(v[hit], np.float32(np.inf))
    elif mode == "libmdown" and mapping == "libm64":
        hit = j % np.uint64(4) == 0
        v[hit] = np.nextafter(v[hit], np.float32(0))
    return v


def main(mode: str) -> int:
    caps = {"protocol": 1, "implementation": {"name": f"mutant-{mode}", "version": "0"}, "contract_version": 1,
            "profiles": {}, "operations": ["at", "member_seed", "stream_seed", "gaussian", "gaussian_ranges"],
            "mappings": ["poly32", "libm64"], "dtypes": [], "schemes": ["iid", "correlated"], "shapings": [],
            "decays": [], "restores": [], "antithetic": True}
    handlers = server.trainer_handlers("numpy")
    gaussian, ranges = handlers["gaussian"], handlers["gaussian_ranges"]

    def faulty_gaussian(args):
        v = gaussian(args)["values"].bits.view(np.float32)
        return {"values": Tensor.of(plant(mode, v, parse_hex(args["first"], "first"), args["mapping"]))}

    def faulty_ranges(args):
        v = ranges(args)["values"].bits.view(np.float32)
        firsts, counts = args["firsts"].bits.reshape(-1).tolist(), args["counts"].bits.reshape(-1).tolist()
        out, at = [], 0
        for f, n in zip(firsts, counts):
            out.append(plant(mode, v[at:at + n], int(f), args["mapping"]))
            at += n
        return {"values": Tensor.of(np.concatenate(out) if out else v)}

    handlers["gaussian"], handlers["gaussian_ranges"] = faulty_gaussian, faulty_ranges
    return server.serve(handlers, caps)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
