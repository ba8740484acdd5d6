"""Test stand-in for es-at-scale's reward shaping (NOT the reference code).

Written from `docs/references.md` §1 alone, with the interface the interface
manifest (esverify/references/es_at_scale/child/interfaces.json) gives the real file. The real module needs
Python 3.12 syntax; this stand-in is valid Python 3.11 on purpose (the
3.12-only variant is a bad-input fixture built by the tests).
"""
import numpy as np  # noqa: F401 - the module-level import docs/references.md §1 lists


def z_score(seeds_perf, mean_reward, std_reward):
    """docs/references.md §1, z_score(seeds_perf, mean_reward, std_reward): stores
    `"norm_reward"` = (avg_reward - mean_reward) / (std_reward + 1e-8) in each
    member's dict, prints a line per member and returns the mapping."""
    for key, perf in seeds_perf.items():
        perf["norm_reward"] = (perf["avg_reward"] - mean_reward) / (std_reward + 1e-8)
        print(f"member {key}: avg_reward {perf['avg_reward']:.6g} -> norm_reward {perf['norm_reward']:.6g}")
    return seeds_perf
