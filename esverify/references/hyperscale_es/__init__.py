"""HyperscaleES (EGGROLL's official JAX code), the sixth reference: our side, in numpy (docs/hyperscale.md).

Design record:
- The reference is GPL-3.0 and would run only in the oracle's child
  process; nothing here comes from its code. What is here is written from
  docs/hyperscale.md and checked against the JAX library itself (Apache-2.0)
  by tests only: this package never imports jax (a test checks it), so a
  user without JAX loses nothing.
- `jaxrandom`: JAX's Threefry-2x32 keys (key, fold_in, split), raw bits,
  uniform and normal in f32, f16 and bf16, in both settings of
  ``jax_threefry_partitionable``.
- `xlamath`: the XLA CPU arithmetic those draws go through (the f32 fused
  multiply-add, log, log1p, erf_inv), with and without FMA.
- `shaping`: the noisers' `convert_fitnesses`, eager f32.
- `noise`: the noisers' key tree and EggRoll's low-rank factors.
- `update`: one EggRoll sgd update of a matrix leaf in f32, bf16 or f16
  (jit and eager arithmetic, XLA's dot order per shape).
- `golden_area`: the golden area `hyperscale-es` (goldens/hyperscale-es.json).
- `profile`: the model as the registry's named profile `hyperscale-es`.
- `contract`: the contract noise the parity rows serve for (epoch, pair, leaf).
- `adapter`, `rows`: the parity spec (esverify.oracle.spec) and its rows (the child: child/driver.py,
  run under an interpreter with jax).
- `REFERENCE`: this package's record in the references registry
  (esverify.registry): its golden area and its adapter.

Dependencies point one way: this package -> numpy (and, for `adapter` and `rows`, the oracle core).
Checks: ``python -m pytest -q tests/test_hyperscale_numerics.py tests/test_hyperscale_adapter.py``,
``esverify goldens check --area hyperscale-es``, and with a jax interpreter
(``$ESVERIFY_JAX_PYTHON``) tests/test_hyperscale_child.py and tests/test_hyperscale_parity.py.
"""
from esverify.record import Reference

REFERENCE = Reference(
    name="hyperscale-es",
    adapter="esverify.references.hyperscale_es.adapter:ADAPTER",
    profiles=("esverify.references.hyperscale_es.profile:PROFILE",),
    golden_areas=("esverify.references.hyperscale_es.golden_area:AREA",),
    clone_modules=("hyperscalees",),
)
