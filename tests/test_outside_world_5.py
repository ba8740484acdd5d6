"""What a user meets on an ordinary machine, round 5: plug-ins, a read-only install, git as the clone is,
optional back-ends, the FPU's rounding mode, the low-rank replay's inputs, the gate's digests for every port.

Each test builds the situation for real where it can (a throwaway distribution on the path with an entry
point in the group ``esverify.references``, a read-only bind mount, a git hook's GIT_DIR, a user's
``diff.mnemonicPrefix``, a clone owned by another user, `fesetround` through ctypes, a wrapper without
the bulk request) and checks what the user reads: one line, the exit code, the value named.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _esverify(args, env=None, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "esverify", *args], capture_output=True, text=True,
                          env=env or ENV, cwd=cwd, timeout=timeout)


def _python(code, env=None, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env or ENV, cwd=cwd,
                          timeout=timeout)


# ------------------------------------------------------------------ 1. plug-ins (entry points)

def _distribution(root: Path, name: str, entry_points: dict, files: dict) -> Path:
    """A throwaway installed distribution: `name`'s dist-info (METADATA, entry_points.txt) and its modules,
    in folder `root` (put on PYTHONPATH, importlib.metadata finds it there as pip would have left it)."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[esverify.references]\n" + "".join(
        f"{k} = {v}\n" for k, v in entry_points.items()), encoding="utf-8")
    for rel, text in files.items():
        (root / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def _broken(tmp_path) -> Path:
    return _distribution(tmp_path / "broken", "esverify-broken-plugin", {"broken-ref": "ow5_broken:REFERENCE"},
                         {"ow5_broken.py": "import ow5_a_dependency_not_installed\n"})


def _fork(tmp_path) -> Path:
    """A fork of es-awd that registers the built-in's name, with no golden areas of its own."""
    return _distribution(tmp_path / "fork", "es-awd-fork", {"es-awd": "ow5_fork:REFERENCE"},
                         {"ow5_fork.py": """\
                             from esverify.registry import Reference
                             REFERENCE = Reference(name="es-awd")
                         """})


def _path_env(*folders) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, folders), str(ROOT)])}


LISTING = ("from esverify import registry; from esverify.goldens import areas; import json; "
           "print(json.dumps({'names': registry.names(), 'areas': areas.area_names(), "
           "'awd_areas': list(registry.get('es-awd').golden_areas), 'problems': registry.problems()}))")


@pytest.fixture(scope="module")
def builtin_listing():
    done = _python(LISTING)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_plugin_that_raises_at_load_is_one_line_and_every_other_command_runs(tmp_path, builtin_listing):
    env = _path_env(_broken(tmp_path))
    listed = _python(LISTING, env=env)
    assert listed.returncode == 0, listed.stderr           # today: ModuleNotFoundError out of every command
    got = json.loads(listed.stdout)
    assert (got["names"], got["areas"]) == (builtin_listing["names"], builtin_listing["areas"])
    line = ("plug-in entry point broken-ref = ow5_broken:REFERENCE (distribution esverify-broken-plugin, group "
            "esverify.references) cannot be loaded: ModuleNotFoundError: No module named "
            "'ow5_a_dependency_not_installed'; it is left out")
    assert got["problems"] == [line]
    assert listed.stderr.splitlines() == [f"esverify: warning: {line}"]
    # a command that needs it: exit 2 with that line
    needs = _esverify(["parity", "--target", "broken-ref", "--ref", str(tmp_path)], env=env)
    assert needs.returncode == 2 and line in needs.stderr and "Traceback" not in needs.stderr, needs.stderr


def test_a_plugin_claiming_a_builtin_name_leaves_the_builtin_and_every_area_and_is_named(tmp_path,
                                                                                          builtin_listing):
    env = _path_env(_fork(tmp_path))
    listed = _python(LISTING, env=env)
    assert listed.returncode == 0, listed.stderr
    got = json.loads(listed.stdout)
    # today the fork wins the name: es-awd's record has no area, the gate walks 5 areas of 6
    assert got["areas"] == builtin_listing["areas"] and "es-awd" in got["areas"]
    assert got["awd_areas"] == builtin_listing["awd_areas"] != []
    assert got["names"] == builtin_listing["names"]
    assert len(got["problems"]) == 1 and "distribution es-awd-fork" in got["problems"][0] \
        and "registers the name 'es-awd', which is a built-in reference's" in got["problems"][0]
    # the conflict is in the gate's report too
    out = tmp_path / "gate.json"
    gate = _esverify(["goldens", "check", "--area", "rng", "--backend", "numpy", "--json", str(out)], env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert json.loads(out.read_text())["metadata"]["plugin_problems"] == got["problems"]
    assert gate.stderr.count("es-awd-fork") == 1


def test_a_plugin_is_validated_when_registered_and_a_name_two_plugins_claim_is_refused(tmp_path):
    shapes = _distribution(tmp_path / "shapes", "esverify-odd-plugins", {
        "not-a-record": "ow5_odd:NOT_A_RECORD", "bad-fields": "ow5_odd:BAD_FIELDS", "toy-a": "ow5_odd:TOY_A",
        "toy-b": "ow5_odd:TOY_B", "takes-area": "ow5_odd:TAKES_AREA"}, {"ow5_odd.py": """\
            import types
            from esverify.registry import Reference
            NOT_A_RECORD = {"name": "not-a-record"}
            BAD_FIELDS = Reference(name="bad-fields", profiles="ow5_odd:PROFILE")
            TOY_A = Reference(name="toy")
            TOY_B = Reference(name="toy")
            # a golden area named as a built-in's: goldens/es-awd.json must stay checked against the built-in
            AREA = types.SimpleNamespace(name="es-awd")
            TAKES_AREA = Reference(name="takes-area", golden_areas=("ow5_odd:AREA",))
        """})
    code = LISTING[:-3] + ", 'modules': dict(areas.AREA_MODULES), 'takes': registry.get('takes-area').golden_areas}))"
    done = _python(code, env=_path_env(shapes))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    problems = got["problems"]
    assert any("not-a-record = ow5_odd:NOT_A_RECORD" in p and "its object is a dict, not an esverify Reference" in p
               for p in problems), problems
    assert any("bad-fields" in p and "its profiles is not a tuple of \"module:attr\" strings" in p for p in problems)
    assert any("the reference name 'toy' is registered by more than one plug-in" in p and "toy-a" in p
               and "toy-b" in p for p in problems), problems
    assert any("its golden area 'es-awd' (ow5_odd:AREA) has the name of an area already registered" in p
               for p in problems), problems
    assert len(problems) == 4
    assert "toy" not in got["names"] and "takes-area" in got["names"] and got["takes"] == []
    assert got["modules"]["es-awd"] == "esverify.references.es_awd.golden_area:AREA"
    refused = _python("from esverify import registry\ntry:\n    registry.get('toy')\nexcept KeyError as e:\n"
                      "    print(e)", env=_path_env(shapes))
    assert refused.stdout.startswith("the reference name 'toy' is registered by more than one plug-in (plug-in "
                                     "entry point toy-a = ow5_odd:TOY_A (distribution esverify-odd-plugins"), refused


# ------------------------------------------------------------------ 2. a read-only install (numba's cache)

NO_CACHE = "numba finds no writable folder for its cache of compiled kernels"


def test_numba_kernels_import_without_a_cache_folder_with_one_warning(tmp_path):
    """numba's own hook for where caches go (NUMBA_CACHE_LOCATOR_CLASSES) given a locator that accepts no
    file: what numba meets in a read-only container with no writable home."""
    (tmp_path / "ow5_locator.py").write_text(
        "class Nowhere:\n    @classmethod\n    def from_function(cls, py_func, py_file):\n        return None\n")
    env = {**_path_env(tmp_path), "NUMBA_CACHE_LOCATOR_CLASSES": "ow5_locator.Nowhere"}
    done = _python("import numpy as np\n"
                   "import esverify.exactsum, esverify.es.cpu_kernels, esverify.es.half_kernels\n"
                   "from esverify.rng import numba_backend as nb\n"
                   "out = np.empty(4, np.float32); nb.poly32(out, 7, 0)\n"
                   "print(out.view(np.uint32).tolist())", env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr   # today: RuntimeError at import
    assert done.stderr.count(NO_CACHE) == 1 and "NUMBA_CACHE_DIR" in done.stderr
    from esverify.rng import scalar
    want = np.array(scalar.gaussian(7, 4, 0, "poly32"), dtype=np.float32).view(np.uint32).tolist()
    assert json.loads(done.stdout) == want


def _can_bind_read_only() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {ROOT} {ROOT}"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _can_bind_read_only(), reason="needs `unshare -m` and bind mounts (root in a container)")
def test_goldens_check_runs_in_a_read_only_install_with_a_read_only_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in ENV.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    script = (f"mount --bind -o ro {ROOT} {ROOT} && mount --bind -o ro {home} {home} && "
              f"exec {sys.executable} -m esverify goldens check --area rng --backend numpy")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env,
                          cwd=str(home), timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert done.stdout.startswith("goldens check: PASS")
    assert done.stderr.count(NO_CACHE) == 1


# ------------------------------------------------------------------ 3. git as the clone is

def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


CLONE_CODE = "def perturb(x):\n    return x + 1\n\n\ndef restore(x):\n    return x - 1\n"


def _clone(path: Path) -> tuple[Path, str]:
    """A small git clone with one commit; its `es.py` then changed inside `perturb` (not committed)."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", ".")
    (path / "es.py").write_text(CLONE_CODE)
    _git(path, "add", "es.py")
    _git(path, "commit", "-q", "-m", "one")
    (path / "es.py").write_text(CLONE_CODE.replace("x + 1", "x + 2"))
    return path, _git(path, "rev-parse", "HEAD")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A HOME of the test's own (its .gitconfig only), as a user's shell would have."""
    folder = tmp_path / "home"
    folder.mkdir()
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return folder


def test_inside_a_git_hook_the_clone_and_its_changes_are_its_own(tmp_path, home, monkeypatch):
    from esverify import gitinfo
    from esverify.oracle import blame
    clone, commit = _clone(tmp_path / "clone")
    other, other_commit = _clone(tmp_path / "project")
    _git(other, "commit", "-q", "-am", "two")
    # what git exports to a hook of the project being committed
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert gitinfo.commit_and_dirty(clone) == (commit, True)     # today: the project's commit, clean
    changes = blame.clone_changes(clone, commit[:7])
    assert (changes.state, changes.head) == ("changed", commit[:7])
    assert [(h.path, h.first, h.function) for h in changes.hunks] == [("es.py", 2, "perturb")]


def test_a_users_diff_prefixes_do_not_turn_blame_around(tmp_path, home):
    from esverify.oracle import blame
    (home / ".gitconfig").write_text("[diff]\n\tmnemonicPrefix = true\n\tinterHunkContext = 10\n"
                                     "[color]\n\tui = always\n")
    clone, commit = _clone(tmp_path / "clone")
    changes = blame.clone_changes(clone, commit[:7])
    assert [(h.path, h.function) for h in changes.hunks] == [("es.py", "perturb")]   # today: "w/es.py"
    line = blame.explain(changes, {"es.py": ["perturb"]}, [])
    assert "es.py:2, in perturb, which this row ran" in line and "none of which" not in line


def test_a_clone_owned_by_another_user_is_named_as_such_and_its_commit_read(tmp_path, home):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the clone to another user")
    from esverify import gitinfo
    from esverify.oracle import blame, clones
    clone, commit = _clone(tmp_path / "clone")
    subprocess.run(["chown", "-R", "nobody", str(clone)], check=True)
    assert clones.git_identity(clone) == (commit, None)         # today: (None, None), "not a git checkout"
    top, line = gitinfo.refusal(clone)
    assert top == clone and line == (f"git refuses the repository at {clone}: it is owned by another user (git's "
                                     f"safe.directory check); git's fix, if you trust it: git config --global "
                                     f"--add safe.directory {clone}")
    changes = blame.clone_changes(clone, commit[:7])
    assert (changes.state, changes.head) == ("refused", commit[:7])
    assert blame.explain(changes, {"es.py": ["perturb"]}, []).startswith(line)


# ------------------------------------------------------------------ 4. optional back-ends: Ray

def test_a_ray_whose_import_raises_is_one_line_with_its_cause(tmp_path, monkeypatch):
    from esverify.replay import runners
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(
        "raise AttributeError(\"module 'pydantic' has no attribute 'v1'\")\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    with pytest.raises(runners.RunnerError) as err:     # today: the AttributeError itself
        runners.run_ray(None, [], "auto", print)
    assert str(err.value) == ("--ray: Ray is installed but cannot be imported (AttributeError: module 'pydantic' "
                              "has no attribute 'v1')")


def test_a_failed_ray_init_keeps_its_cause(monkeypatch):
    from esverify.replay import runners
    mismatch = ("Version mismatch: The cluster was started with:\n    Ray: 2.9.0\n    Python: 3.10.12\n"
                "This process on node 10.0.0.2 was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n")

    def init(**kw):
        raise RuntimeError(mismatch)
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(runners.RunnerError) as err:     # today: "cannot connect ... start one here"
        runners.run_ray(None, [], "auto", print)
    text = str(err.value)
    assert "\n" not in text and "start one here" not in text
    assert text == ("--ray auto: ray.init failed: RuntimeError: Version mismatch: The cluster was started with: "
                    "Ray: 2.9.0 Python: 3.10.12 This process on node 10.0.0.2 was started with: Ray: 2.60.0 "
                    "Python: 3.11.7")


# ------------------------------------------------------------------ 5. the FPU's rounding mode

#: fesetround's modes on x86-64 glibc (fenv.h) and the words the probe uses for them
MODES = {0x400: "downward", 0x800: "upward", 0xC00: "toward zero"}
x86_glibc = pytest.mark.skipif(not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"),
                               reason="FE_* values are x86-64 glibc's")


def _rounding(mode: int) -> str:
    return f"import ctypes\nassert ctypes.CDLL('libm.so.6').fesetround({mode}) == 0\n"


@x86_glibc
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_probe_names_each_rounding_mode(mode):
    done = _python(_rounding(mode) + "from esverify.numerics_probe import flush_to_zero_status as f\n"
                   "s = f(import_torch=False)\nprint(s.flushing, s.rounding, sep='|')\nprint(s.message())")
    flushing, rounding = done.stdout.splitlines()[0].split("|")
    assert (flushing, rounding) == ("True", MODES[mode]), done.stdout + done.stderr
    assert done.stdout.splitlines()[1].startswith(f"this process rounds {MODES[mode]}, not to nearest")


@x86_glibc
def test_goldens_check_refuses_a_process_rounding_toward_zero_in_one_line():
    done = _python(_rounding(0xC00) + "import sys\nfrom esverify.cli import main\n"
                   "sys.argv = ['esverify', 'goldens', 'check', '--area', 'rng', '--backend', 'numpy']\nmain()")
    assert done.returncode == 2, done.stdout + done.stderr     # today: it runs, and blames the backends
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("goldens check: ERROR (exit 2): this process rounds toward zero, "
                                                   "not to nearest (the FPU's rounding mode)"), done.stderr


@x86_glibc
@pytest.mark.slow
def test_a_clone_that_sets_the_rounding_mode_fails_the_rows_its_child_ran(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from standins.mutants import make_variant

    from esverify.oracle import Options, run_parity
    clone = make_variant(tmp_path, "es-awd", [("weight_update_utils.py", "import torch\n",
                                               "import torch\n" + _rounding(0xC00).replace("assert ", ""))])
    result = run_parity(Options(ref=str(clone), target="es-awd", devices=("cpu",), dtypes=("f32",),
                                schemes=("correlated",), iterations=1, small=True, case="*/cpu/f32/correlated/perturb/N7",
                                out=str(tmp_path / "out"), quiet=True))
    row = result.frame.iloc[0]
    assert (row["status"], row["diagnosis"]) == ("fail", "flush"), row["detail"]
    assert row["detail"].startswith("the es-awd child rounds other than to nearest (the FPU's rounding mode) after "
                                    "this case: rounding: Python f64 1 + u/4, 1 + 3u/4 and -1 - 3u/4 round as "
                                    "toward zero, not to nearest")
    assert any(w.startswith("es-awd: the child rounds other than to nearest") for w in result.metadata["warnings"])


# ------------------------------------------------------------------ 7. the gate's digests without gaussian_ranges

NO_BULK_WRAPPER = '''\
import sys
sys.path[:0] = [{root!r}]
import numpy as np
from esverify.impl import server
from esverify.impl.wire import Tensor, parse_hex

caps = {{"protocol": 1, "implementation": {{"name": "no-bulk-" + sys.argv[1], "version": "0"}}, "contract_version": 1,
        "profiles": {{}}, "operations": ["at", "member_seed", "stream_seed", "gaussian"],
        "mappings": ["poly32", "libm64"], "dtypes": [], "schemes": ["iid", "correlated"], "shapings": [],
        "decays": [], "restores": [], "antithetic": True}}
handlers = server.trainer_handlers("numpy")
del handlers["gaussian_ranges"]
gaussian = handlers["gaussian"]


def one_in_a_thousand(args):
    v = np.array(gaussian(args)["values"].bits.view(np.float32))
    if sys.argv[1] == "fault":   # one ulp up at every element j = 999 mod 1000 past the short vectors' reach
        j = np.arange(v.size, dtype=np.uint64) + np.uint64(parse_hex(args["first"], "first"))
        hit = (j % np.uint64(1000) == np.uint64(999)) & (j >= np.uint64(4096))
        v[hit] = np.nextafter(v[hit], np.float32(np.inf))
    return {{"values": Tensor.of(v)}}


handlers["gaussian"] = one_in_a_thousand
sys.exit(server.serve(handlers, caps))
'''


def _gate_without_bulk(tmp_path, mode):
    from esverify.goldens import gate
    from esverify.goldens.impl_target import ImplTarget
    script = tmp_path / "no_bulk.py"
    script.write_text(NO_BULK_WRAPPER.format(root=str(ROOT)), encoding="utf-8")
    target = ImplTarget(f"{sys.executable} {script} {mode}", log_path=tmp_path / "impl.log", deadline_s=120, env=ENV)
    try:
        return gate.check(ROOT / "goldens", ["rng"], impl=target)
    finally:
        target.close()


@pytest.mark.slow
def test_a_port_without_gaussian_ranges_is_gated_on_the_digests(tmp_path):
    result = _gate_without_bulk(tmp_path, "fault")
    assert not [r for r in result.rows if r["status"] == "unsupported"]   # today: 6 digests unsupported, PASS
    assert result.exit_code(False) == 1
    failing = [r for r in result.rows if r["status"] == "mismatch"]
    assert {r["vector"] for r in failing} >= {"gaussian-digest-poly32-2p20", "noise-digest-iid-poly32-2p20"}
    assert all("digest" in r["vector"] for r in failing), failing      # the short vectors never reach j >= 4096
    first = next(r for r in failing if r["vector"] == "gaussian-digest-poly32-2p20")
    assert (first["element"], first["ulp"]) == (4999, 1)   # range 0 (seed 0, from 0): element 4999 is the first hit
    assert "range 0: element 4999 of the stream of seed 0x0000000000000000" in first["detail"]


@pytest.mark.slow
def test_a_clean_port_without_gaussian_ranges_passes_every_digest(tmp_path):
    result = _gate_without_bulk(tmp_path, "ok")
    assert result.exit_code(True) == 0, result.verdict(True)
    assert not [r for r in result.rows if r["status"] == "unsupported"]


# ------------------------------------------------------------------ 6. the low-rank replay's inputs

def _lowrank_log(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from test_eggroll_lowrank import _logged_run
    _logged_run(tmp_path)
    return tmp_path / "log"


#: (setting, bad value, the words of the one line): each a value the loop itself refuses
BAD_SETTINGS = [("rank", 0, "rank must be an int >= 1, got 0"),                       # today: ZeroDivisionError
                ("steps_per_adapter", 0, "steps_per_adapter must be an int >= 1, got 0"),   # ZeroDivisionError
                ("sigma", -0.5, "sigma must be > 0, got -0.5"),                    # today: math domain error
                ("sigma", None, "sigma must be a finite number, got None"),        # today: TypeError
                ("population", 3, "population must be an even int >= 2, got 3"),
                ("rank", 2.0, "rank must be an int >= 1, got 2.0"),
                ("chunk_size", 0, "chunk_size must be a positive int or None, got 0"),
                ("normalize_with_std", "yes", "normalize_with_std must be true or false, got 'yes'"),
                ("noise", "gaussian", "noise: unknown value 'gaussian'"),
                ("peft_shapes", [["x", [4]]], "peft_shapes[0] must be [name, [out >= 1, in >= 1]], got ['x', [4]]")]


@pytest.mark.parametrize("setting, value, words", BAD_SETTINGS, ids=[f"{s}={v!r}" for s, v, _ in BAD_SETTINGS])
def test_the_low_rank_replay_refuses_a_bad_setting_in_one_line_before_any_work(tmp_path, monkeypatch, setting,
                                                                               value, words):
    from esverify.references.eggroll import lowrank
    from esverify.replay.api import ReplayError, replay
    log = _lowrank_log(tmp_path)
    args = json.loads((log / "args.json").read_text())
    (log / "args.json").write_text(json.dumps(dict(args, **{setting: value})))
    monkeypatch.setattr(lowrank, "apply_update_", lambda *a, **k: pytest.fail("an update ran"))
    with pytest.raises(ReplayError) as err:
        replay(tmp_path / "base.safetensors", log, tmp_path / "final.safetensors", state_dir=tmp_path / "state")
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"--log {log}: {log / 'args.json'}: {words}"), text
    assert not (tmp_path / "state").exists()


def test_the_low_rank_replay_command_exits_2_for_a_zero_rank(tmp_path):
    log = _lowrank_log(tmp_path)
    args = json.loads((log / "args.json").read_text())
    (log / "args.json").write_text(json.dumps(dict(args, rank=0)))
    done = _esverify(["replay", "--base", str(tmp_path / "base.safetensors"), "--log", str(log), "--expect",
                      str(tmp_path / "final.safetensors"), "--state-dir", str(tmp_path / "state")], cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [f"error: --log {log}: {log / 'args.json'}: rank must be an int >= 1, got 0"]


@pytest.mark.parametrize("option, key", [("--state-dir", "state_dir"), ("--report", "report_path"), ("--out", "out")])
def test_the_low_rank_replay_probes_its_destinations_before_any_work(tmp_path, monkeypatch, option, key):
    from esverify.references.eggroll import lowrank
    from esverify.replay.api import ReplayError, replay
    log = _lowrank_log(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    below = blocker / "below" if key == "state_dir" else blocker / "below" / "x.json"
    monkeypatch.setattr(lowrank, "apply_update_", lambda *a, **k: pytest.fail("an update ran"))
    with pytest.raises(ReplayError) as err:     # today: the whole replay runs, then an OSError traceback
        replay(tmp_path / "base.safetensors", log, tmp_path / "final.safetensors",
               **{"state_dir": tmp_path / "state", key: below})
    assert str(err.value) == f"--log {log}: {option} {below}: {blocker} is a file, not a directory"
