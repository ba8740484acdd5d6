"""EGGROLL (eggroll-vllm), the fifth reference: low-rank ES through LoRA adapters.

Design record:
- The reference is GPL-3.0 and runs only in the oracle's child process;
  nothing here comes from its code. What is here is OUR SIDE, written from
  the low-rank profile of docs/numerics.md §9 and the contract area
  `eggroll` of docs/CONTRACT.md §10.
- `contract`: the contract area `eggroll` v1 (`LOWRANK_DOMAIN`,
  `lowrank_stream_seed`, `lowrank_factors`) and the native noise
  (`native_factors`: torch's CPU generator seeded with the reference's id,
  two draws). One small module, imported by our trainer AND by the child
  driver's hook, so the two sides cannot spell the stream differently.
- `lowrank`: the pieces of the profile (adapters, evaluated perturbation
  B·A, fitness shaping, pair differences, chunk sizes, the update of one
  weight, the fused-slice mapping) and `run_lowrank_loop`, the whole loop
  a parity row calls on our side.
- `golden_area`: the golden area `eggroll` (goldens/eggroll.json).
- `runlog`: the run log our loop writes and its replay, which `esverify
  replay` dispatches to (docs/replay.md §10).
- `shapes`: peft and vLLM names and shapes of a Qwen-style decoder.
- `REFERENCE`: this package's record in the references registry
  (esverify.registry); its golden area, and the parity adapter once it
  exists.
- `logfiles`: the run log's files as the loop writes them (`runlog` reads them).
- `adapter`, `rows`: the parity adapter (`esverify parity --ref CLONE`) and its
  whole-loop rows: the trainer's `main` in the child against `run_lowrank_loop`.

Dependencies point one way: this package -> esverify.rng, numpy, torch.
Checks: ``python -m pytest -q tests/test_eggroll_lowrank.py`` and
``esverify goldens check --area eggroll``.
"""
from esverify.record import Reference

REFERENCE = Reference(
    name="eggroll",
    adapter="esverify.references.eggroll.adapter:ADAPTER",
    profiles=("esverify.references.eggroll.lowrank:PROFILE",),
    golden_areas=("esverify.references.eggroll.golden_area:AREA",),
    runlog_formats=("esverify.references.eggroll.runlog:RUNLOG_FORMAT",),
    child_modules=("esverify.references.eggroll.contract", "esverify.references.eggroll.tape_arrays"),
)
