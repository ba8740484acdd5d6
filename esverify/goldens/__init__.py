"""Bit-level goldens: format, schema, generation and the gate (docs/CONTRACT.md §5).

One JSON file per contract area (`rng`, `es-at-scale`, `es-awd`), each
with its own version. See `area.py` for how an area plugs in.
"""
