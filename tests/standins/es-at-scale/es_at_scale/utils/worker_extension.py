"""Test stand-in for es-at-scale's worker extension (NOT the reference code).

Written by the esverify authors from `docs/references.md` §1 alone,
so that the oracle runner can be tested without a clone of the reference.
It keeps the behaviour docs/references.md describes, quirks included: global
reseeding (numpy's legacy seeding refuses seeds >= 2**32), a new
`torch.Generator` per tensor seeded with the same seed, lazy walking of
`named_parameters()`, printing to stdout, and the synchronize/empty_cache
calls. Mutants for the mutation test are made by editing one detail of a
copy of this file (tests/standins/mutants.py).
"""
import gc  # noqa: F401 - imported at module level as docs/references.md §1 lists
import random
import time

import numpy
import torch


class WorkerExtension:
    """docs/references.md §1, defines class WorkerExtension, built with no arguments.

    Works on `self.model_runner.model`, whose `named_parameters()` yields
    (name, tensor) pairs; the oracle driver sets `model_runner`.
    """

    def _seed_everything(self, seed):
        """docs/references.md §1, perturb_self_weights: seeds Python's random, numpy's
        legacy global generator (so seed must be below 2**32, else ValueError),
        torch's CPU generator and every CUDA device."""
        random.seed(seed)
        numpy.random.seed(seed)
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)

    def _noise(self, param, seed):
        """docs/references.md §1: noise of the parameter's shape, dtype and device from
        torch.randn with a new torch.Generator seeded seed (the same seed for
        every tensor)."""
        generator = torch.Generator(device=param.device)
        generator.manual_seed(seed)
        return torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)

    def _settle(self):
        """docs/references.md §1: torch.cuda.synchronize() only when CUDA is available
        and torch.cuda.empty_cache() always."""
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def perturb_self_weights(self, seed, noise_scale, negate=False):
        """docs/references.md §1, perturb_self_weights(seed, noise_scale, negate=False):
        adds (±noise_scale) * noise in place to every parameter, prints one line."""
        started = time.time()
        self._seed_everything(seed)
        scale = -noise_scale if negate else noise_scale
        for name, param in self.model_runner.model.named_parameters():
            noise = self._noise(param, seed)
            param.data.add_(scale * noise)
            del noise
        self._settle()
        print(f"perturbed weights with seed {seed} scale {scale} in {time.time() - started:.3f}s")

    def restore_self_weights(self, seed, sigma):
        """docs/references.md §1, restore_self_weights(seed, sigma): the same draw, adds
        (-sigma) * noise. Returns True."""
        self._seed_everything(seed)
        for name, param in self.model_runner.model.named_parameters():
            noise = self._noise(param, seed)
            param.data.add_(-sigma * noise)
            del noise
        self._settle()
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
                noise = self._noise(param, seed)
                update.add_(noise.to(torch.float32) * coeff)
                del noise
            update.mul_(alpha / population_size)
            param.data.add_(update.to(param.dtype))
            del update
        self._settle()
        return True

    def save_self_weights_to_disk(self, path):
        """docs/references.md §5, fit: "It saves engine 0's weights at the end" (with torch.save of the
        model's state_dict; the folder is created when missing)."""
        import os
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        torch.save(self.model_runner.model.state_dict(), path)
        return True
