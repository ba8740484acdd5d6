"""Test stand-in for es-awd's distributed helpers (NOT the reference code).

Written by the esverify authors from `docs/references.md` §5 (and
§2 for the numerics) alone, with the interface the interface manifest
(esverify/references/es_awd/child/interfaces.json) gives the real file: the same module-level
imports (Ray and vLLM internals: the parity child serves inert stand-ins),
`ESNcclLLM`, the es-awd `WorkerExtension` (perturb/restore with `caching`
and `negate`, update with decay, snapshot, restore-from-snapshot, the
inter-engine group, broadcast and write-to-disk, on the numerics of
weight_update_utils.py), `launch_engines` and `cleanup`. The engine launch
and cleanup helpers are replaced by the child.
"""
import os
import time
import tempfile

import torch
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from vllm import LLM
from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.utils import StatelessProcessGroup

from weight_update_utils import apply_seeded_noise_to_parameters, update_parameters_from_seeds


class ESNcclLLM(LLM):
    """docs/references.md §5.2: the vLLM engine class launch_engines starts (one per placement group)."""

    def __init__(self, *args, **kwargs):
        # the placement group gives the actor its GPU: vLLM must not be narrowed by the driver's setting
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        super().__init__(*args, **kwargs)

    def __repr__(self):
        return f"ESNcclLLM(pid={os.getpid()})"


class WorkerExtension:
    """docs/references.md §5.2, distributed_utils.py: "the es-awd WorkerExtension"; works on
    `self.model_runner.model` like es-at-scale's (§1)."""

    def perturb_self_weights(self, seed, noise_scale, caching=False, negate=False):
        """docs/references.md §5.2: perturb with `caching` and `negate` (§2: "perturb with +sigma, ...
        mirrored members with the signs swapped")."""
        scale = -noise_scale if negate else noise_scale
        apply_seeded_noise_to_parameters(self.model_runner.model.parameters(), seed, scale, caching=caching)
        return True

    def restore_self_weights(self, seed, noise_scale, caching=False, negate=False):
        """docs/references.md §5.2: restore with `caching` and `negate` (§2: "restore with -sigma, mirrored
        members with the signs swapped")."""
        scale = noise_scale if negate else -noise_scale
        apply_seeded_noise_to_parameters(self.model_runner.model.parameters(), seed, scale, caching=caching)
        return True

    def update_weights_from_seeds(self, seeds, coeffs, alpha, population_size, caching=False,
                                  weight_decay_type='none', weight_decay_lambda=0.0):
        """docs/references.md §5.2: update_weights_from_seeds(seeds, coeffs, alpha, population_size, caching,
        weight_decay_type, weight_decay_lambda), decaying toward the CPU snapshot when there is one."""
        started = time.time()
        update_parameters_from_seeds(self.model_runner.model.parameters(), seeds, coeffs, alpha, population_size,
                                     caching=caching, original_parameters=getattr(self, "cpu_snapshot", None),
                                     weight_decay_type=weight_decay_type, weight_decay_lambda=weight_decay_lambda)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        print(f"updated weights from {len(seeds)} seeds in {time.time() - started:.3f}s")
        return True

    def snapshot_weights_to_cpu(self):
        """docs/references.md §5.2: "a snapshot taken before the loop by snapshot_weights_to_cpu" (the
        anchor of the weight decay), a CPU copy of every parameter in order."""
        self.cpu_snapshot = [param.detach().to("cpu", copy=True) for param in self.model_runner.model.parameters()]
        return True

    def restore_self_weights_from_cpu(self):
        """docs/references.md §5.2: "restore-from-snapshot": every parameter copied back from the snapshot."""
        with torch.no_grad():
            for param, saved in zip(self.model_runner.model.parameters(), self.cpu_snapshot):
                param.copy_(saved.to(param.device))
        return True

    def init_inter_engine_group(self, master_address, master_port, rank, world_size):
        """docs/references.md §5.2: the group of all engines, vLLM's StatelessProcessGroup with a
        PyNcclCommunicator on the worker's device. Returns True."""
        pg = StatelessProcessGroup.create(host=master_address, port=int(master_port), rank=rank,
                                          world_size=world_size)
        self.inter_pg = PyNcclCommunicator(pg, device=self.device)
        return True

    def broadcast_all_weights(self, src_rank):
        """docs/references.md §5: the engines share engine `src_rank`'s weights over the inter-engine group
        (the parity child's engines copy engine 0's tensors instead). Returns True."""
        for param in self.model_runner.model.parameters():
            self.inter_pg.broadcast(param, src=src_rank, stream=torch.cuda.current_stream())
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return True

    def write_weights_to_disk(self, path):
        """docs/references.md §5.2: "write_weights_to_disk saves engine 0's state_dict() with torch.save"."""
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        torch.save(self.model_runner.model.state_dict(), path)
        return True


def launch_engines(num_engines, model_name, precision='bfloat16'):
    """docs/references.md §5.2: one ESNcclLLM Ray actor per single-GPU placement group, then every engine
    joins the inter-engine group. Returns (engines, placement_groups)."""
    pgs = [placement_group([{"GPU": 1, "CPU": 0}], lifetime="detached") for _ in range(num_engines)]
    ray.get([pg.ready() for pg in pgs])
    engines = []
    for pg in pgs:
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_capture_child_tasks=True,
                                                    placement_group_bundle_index=0)
        engines.append(ray.remote(num_cpus=0, num_gpus=0, scheduling_strategy=strategy)(ESNcclLLM).remote(
            model=model_name, tensor_parallel_size=1, distributed_executor_backend="ray", dtype=precision,
            worker_extension_cls="distributed_utils.WorkerExtension", enable_prefix_caching=False,
            download_dir=os.path.join(tempfile.gettempdir(), "es-awd-models")))
    master_address = ray.util.get_node_ip_address()
    master_port = 29500 + os.getpid() % 10000
    ray.get([engine.collective_rpc.remote("init_inter_engine_group",
                                          args=(master_address, master_port, rank, num_engines))
             for rank, engine in enumerate(engines)])
    return engines, pgs


def cleanup(engines, pgs, wandb_run):
    """docs/references.md §5.2: the engines killed, their placement groups removed, the wandb run finished."""
    for engine in engines:
        ray.kill(engine)
    for pg in pgs:
        remove_placement_group(pg)
    if wandb_run is not None:
        wandb_run.finish()
