"""The clean-room trainer's run log: the schema es-awd writes, so a run can be replayed (docs/replay.md §2).

`RunLogWriter(folder, trainer)` writes `args.json` (alpha, sigma,
population_size, mirror_sampling, caching, weight_decay_type/lambda,
precision, num_engines, plus an `esverify` block: format, profile, noise,
mapping, scheme, slot names, first iteration) and, after each update,
`iteration_updates/iteration_NNNNNN.json` with `iteration`, `seeds`,
`update_coefficients` and `evaluated_on_saved`: the (seed index, sign)
pairs that were perturbed and restored on the trainer's own weights
before the update (`restore="regenerate"` leaves `(x + s) - s` residue;
`materialize` and `snapshot` restores leave none). Files are written
atomically. Seeds are the u64 member seeds under contract noise and the
torch seeds under torch noise.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

FORMAT = "esverify.es.runlog/1"
UPDATES = "iteration_updates"


def _write(path: Path, doc: dict) -> None:
    # temp file + rename in the same folder: a reader never sees half a record
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class RunLogWriter:
    """Writes a trainer's run log into `folder` (created; docs/replay.md §2).

    An existing args.json must be the one this trainer would write (a
    resumed run continues its log); ValueError otherwise, naming the file.
    """

    def __init__(self, folder, trainer):
        self.folder = Path(folder)
        (self.folder / UPDATES).mkdir(parents=True, exist_ok=True)
        cfg = trainer.config
        args = {"alpha": cfg.alpha, "sigma": cfg.sigma, "population_size": cfg.population,
                "mirror_sampling": cfg.antithetic, "caching": False, "weight_decay_type": cfg.anchor_decay,
                "weight_decay_lambda": cfg.anchor_lambda, "precision": None, "num_engines": 1,
                "esverify": {"format": FORMAT, "profile": cfg.profile, "noise": trainer.noise.kind,
                             "mapping": cfg.mapping, "scheme": cfg.scheme,
                             "slots": [name for name, _ in trainer.slots], "first_iteration": trainer.iteration,
                             "restore": cfg.restore}}
        path = self.folder / "args.json"
        if path.exists():
            known = json.loads(path.read_text())
            known_first = known.get("esverify", {}).get("first_iteration")
            mine = dict(args, esverify=dict(args["esverify"], first_iteration=known_first))
            if known != mine:
                raise ValueError(f"{path}: holds another run's settings; give run_log a new folder")
        else:
            _write(path, args)

    def iteration(self, number: int, seeds, coeffs, evaluated) -> None:
        """Write iteration `number`'s record (seeds: ints, coeffs: f64, evaluated: (seed index, sign) pairs)."""
        doc = {"iteration": int(number), "seeds": [int(s) for s in seeds],
               "update_coefficients": [float(c) for c in coeffs],
               "evaluated_on_saved": [[int(k), int(s)] for k, s in evaluated]}
        _write(self.folder / UPDATES / f"iteration_{int(number):06d}.json", doc)
