"""Test stand-in for es-awd's distributed helpers (NOT the reference code).

Written by the esverify authors from `docs/references.md` §5 (and
§2 for the numerics) alone. Like the real file is described to, it imports
Ray and vLLM internals at module level (the parity child serves inert
stand-ins) and holds the es-awd `WorkerExtension`: perturb/restore with
`caching` and `negate`, update with decay, snapshot, restore-from-snapshot
and write-to-disk, on the numerics of weight_update_utils.py. The engine
launch and cleanup helpers are replaced by the child.
"""
import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from vllm import LLM
from vllm.distributed.parallel_state import get_world_group  # noqa: F401 - a vLLM internal, as §5 lists

from weight_update_utils import apply_seeded_noise_to_parameters, update_parameters_from_seeds


class WorkerExtension:
    """docs/references.md §5, distributed_utils.py: "the es-awd WorkerExtension"; works on
    `self.model_runner.model` like es-at-scale's (§1)."""

    def perturb_self_weights(self, seed, sigma, caching=False, negate=False):
        """docs/references.md §5: perturb with `caching` and `negate` (§2: "perturb with +sigma, ...
        mirrored members with the signs swapped")."""
        scale = -sigma if negate else sigma
        apply_seeded_noise_to_parameters(self.model_runner.model.parameters(), seed, scale, caching=caching)
        return True

    def restore_self_weights(self, seed, sigma, caching=False, negate=False):
        """docs/references.md §5: restore with `caching` and `negate` (§2: "restore with -sigma, mirrored
        members with the signs swapped")."""
        scale = sigma if negate else -sigma
        apply_seeded_noise_to_parameters(self.model_runner.model.parameters(), seed, scale, caching=caching)
        return True

    def update_weights_from_seeds(self, seeds, coeffs, alpha, population_size, caching=False,
                                  weight_decay_type="none", weight_decay_lambda=0.0):
        """docs/references.md §5: update_weights_from_seeds(seeds, coeffs, alpha, population_size, caching,
        weight_decay_type, weight_decay_lambda), decaying toward the snapshot when there is one."""
        snapshot = getattr(self, "_snapshot", None)
        device_anchor = None
        if snapshot is not None:
            device_anchor = (saved.to(param.device) for saved, param in
                             zip(snapshot, self.model_runner.model.parameters()))
        update_parameters_from_seeds(self.model_runner.model.parameters(), seeds, coeffs, alpha, population_size,
                                     caching=caching, original_parameters=device_anchor,
                                     weight_decay_type=weight_decay_type, weight_decay_lambda=weight_decay_lambda)
        return True

    def snapshot_weights_to_cpu(self):
        """docs/references.md §5: "a snapshot taken before the loop by snapshot_weights_to_cpu"."""
        self._snapshot = [param.detach().to("cpu").clone() for param in self.model_runner.model.parameters()]
        return True

    def restore_weights_from_snapshot(self):
        """docs/references.md §5: "restore-from-snapshot"."""
        with torch.no_grad():
            for param, saved in zip(self.model_runner.model.parameters(), self._snapshot):
                param.copy_(saved.to(param.device))
        return True

    def write_weights_to_disk(self, path):
        """docs/references.md §5: "write_weights_to_disk saves engine 0's state_dict() with torch.save"."""
        torch.save(self.model_runner.model.state_dict(), path)
        return True

    def broadcast_all_weights(self, src_rank):
        """docs/references.md §5: the engines share engine `src_rank`'s weights (a collective over the
        inter-engine group; the parity child's engines copy engine 0's tensors instead)."""
        raise RuntimeError("broadcast_all_weights needs the inter-engine group of a real launch")


def launch_engines(num_engines, model_name):
    """docs/references.md §5: "launch_engines/cleanup (from distributed_utils, replace them with
    stand-ins)": one vLLM engine per placement group. Returns (engines, placement_groups)."""
    groups, engines = [], []
    for _ in range(num_engines):
        group = placement_group([{"GPU": 1, "CPU": 1}])
        strategy = PlacementGroupSchedulingStrategy(placement_group=group)
        engines.append(ray.remote(num_gpus=1, scheduling_strategy=strategy)(LLM).remote(
            model=model_name, worker_extension_cls="distributed_utils.WorkerExtension"))
        groups.append(group)
    return engines, groups


def cleanup(engines, placement_groups):
    """docs/references.md §5: cleanup of the engines and their placement groups."""
    for engine in engines:
        ray.kill(engine)
    for group in placement_groups:
        remove_placement_group(group)
