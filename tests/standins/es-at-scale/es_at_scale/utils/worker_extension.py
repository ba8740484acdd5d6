"""Test stand-in for es-at-scale's worker extension (NOT the reference code).

Written by the esverify authors from `docs/references.md` §1 and §5 alone,
so that the oracle runner can be tested without a clone of the reference.
It has the interface the docs and the interface manifest
(esverify/references/es_at_scale/child/interfaces.json) give the real file: module-level imports gc,
time, torch, random and numpy only (vLLM inside the distributed helper),
the module function `_stateless_init_process_group` and exactly the
`WorkerExtension` methods listed there. It keeps the behaviour
docs/references.md describes, quirks included: global reseeding (numpy's
legacy seeding refuses seeds >= 2**32), a new `torch.Generator` per tensor
seeded with the same seed, lazy walking of `named_parameters()`, printing
to stdout, and the synchronize/empty_cache calls. Mutants for the mutation
test are made by editing one detail of a copy of this file
(tests/standins/mutants.py).
"""
import gc
import time
import torch
import random
import numpy as np


def _stateless_init_process_group(master_address, master_port, rank, world_size, device):
    """docs/references.md §5.1: the inter-engine group is vLLM's StatelessProcessGroup with a
    PyNcclCommunicator on `device` (vLLM is imported here, never at module level, §1)."""
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup
    pg = StatelessProcessGroup.create(host=master_address, port=master_port, rank=rank, world_size=world_size)
    return PyNcclCommunicator(pg, device=device)


class WorkerExtension:
    """docs/references.md §1, defines class WorkerExtension, built with no arguments.

    Works on `self.model_runner.model`, whose `named_parameters()` yields
    (name, tensor) pairs; the oracle driver sets `model_runner` (and, for
    the loops, the worker fields `rank`, `world_size`, `local_rank`, `device`).
    """

    def _set_seed(self, seed):
        """docs/references.md §1, perturb_self_weights: seeds Python's random, numpy's
        legacy global generator (so seed must be below 2**32, else ValueError),
        torch's CPU generator and every CUDA device."""
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)

    def save_self_initial_weights(self):
        """A CPU copy of every parameter, by name (kept on the worker as `initial_weights`)."""
        self.initial_weights = {name: param.detach().to("cpu", copy=True)
                                for name, param in self.model_runner.model.named_parameters()}
        return True

    def restore_self_weights(self, seed, sigma):
        """docs/references.md §1, restore_self_weights(seed, sigma): the same draw as
        perturb_self_weights, adds (-sigma) * noise. Returns True."""
        self._set_seed(seed)
        for name, param in self.model_runner.model.named_parameters():
            generator = torch.Generator(device=param.device)
            generator.manual_seed(seed)
            noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)
            param.data.add_(-sigma * noise)
            del noise
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return True

    def init_inter_engine_group(self, master_address, master_port, engine_idx, num_engines):
        """docs/references.md §5.1: joins the group of all engines. The worker's rank and world size
        come from `rank`/`world_size`, else `local_rank` and `parallel_config.tensor_parallel_size`;
        neither is a RuntimeError. Returns True."""
        if hasattr(self, "rank") and hasattr(self, "world_size"):
            local_rank, local_world_size = self.rank, self.world_size
        elif hasattr(self, "local_rank") and hasattr(self, "parallel_config"):
            local_rank, local_world_size = self.local_rank, self.parallel_config.tensor_parallel_size
        else:
            raise RuntimeError("init_inter_engine_group: the worker has neither rank/world_size nor "
                               "local_rank/parallel_config")
        rank = engine_idx * local_world_size + local_rank
        world_size = num_engines * local_world_size
        self.inter_engine_group = _stateless_init_process_group(master_address, int(master_port), rank,
                                                                world_size, self.device)
        return True

    def broadcast_all_weights(self, src_rank):
        """docs/references.md §5: every engine receives engine `src_rank`'s tensors over the inter-engine
        group (the parity child's engines copy engine 0's tensors instead). Returns True."""
        for name, param in self.model_runner.model.named_parameters():
            self.inter_engine_group.broadcast(param, src=src_rank, stream=torch.cuda.current_stream())
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return True

    def update_weights_from_seeds(self, seeds, coeffs, alpha, population_size):
        """docs/references.md §1, update_weights_from_seeds: per parameter an f32
        accumulator; per (seed, coeff) in order the noise (drawn in the parameter
        dtype) widened to f32, times the coefficient, added to the accumulator;
        then the accumulator times alpha / population_size (a Python float
        division) once, added to the parameter after conversion to its dtype."""
        for name, param in self.model_runner.model.named_parameters():
            update = torch.zeros(param.shape, dtype=torch.float32, device=param.device)
            for seed, coeff in zip(seeds, coeffs):
                generator = torch.Generator(device=param.device)
                generator.manual_seed(seed)
                noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)
                update.add_(noise.to(torch.float32) * coeff)
                del noise
            update.mul_(alpha / population_size)
            param.data.add_(update.to(param.dtype))
            del update
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return True

    def perturb_self_weights(self, seed, noise_scale, negate=False):
        """docs/references.md §1, perturb_self_weights(seed, noise_scale, negate=False):
        adds (±noise_scale) * noise in place to every parameter, prints one line."""
        started = time.time()
        self._set_seed(seed)
        scale = -noise_scale if negate else noise_scale
        for name, param in self.model_runner.model.named_parameters():
            generator = torch.Generator(device=param.device)
            generator.manual_seed(seed)
            noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)
            param.data.add_(scale * noise)
            del noise
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        print(f"perturbed weights with seed {seed} scale {scale} in {time.time() - started:.3f}s")

    def save_self_weights_to_disk(self, filepath):
        """docs/references.md §5.1, fit saves engine 0's weights: torch.save of the model's state_dict,
        the folder created when missing. Returns True."""
        import os
        os.makedirs(os.path.dirname(filepath) or ".", exist_ok=True)
        torch.save(self.model_runner.model.state_dict(), filepath)
        gc.collect()
        return True

    def load_weights_from_disk(self, filepath):
        """docs/references.md §5.1, a checkpoint: every parameter copied from the state_dict saved at
        `filepath`, by name. Returns True."""
        state = torch.load(filepath, map_location="cpu", weights_only=True)
        with torch.no_grad():
            for name, param in self.model_runner.model.named_parameters():
                param.copy_(state[name].to(param.device))
        del state
        gc.collect()
        return True
