"""The warm start server: forks reference children that have torch already imported.

Run BY PATH under the child's interpreter, with the environment and the private
package folder a child gets (esverify.oracle.warm_start starts it; this
package never imports it). It imports what every driver imports first (torch,
numpy, numba where the interpreter has it, the contract's noise kernels, loaded
from numba's cache), then
answers requests on a Unix socket, one at a time:

- `spawn`: fork a supervisor (supervise.arm and supervise.watch, the code the
  classic supervisor runs), which forks the child. The child makes itself what
  `python DRIVER --clone ... --reply-fd N` started fresh would be: the
  default signal handlers and the resource limits (supervise.unarm), the
  three pipes on stdin, stdout/stderr and the reply fd and no other fd, its
  working folder, exactly the environment it was given, the driver's folder
  and its own package folder at the front of sys.path, fresh seeds for
  `random` and numpy's global generator; then it runs the driver as
  __main__ and exits as the interpreter would (non-daemon threads joined,
  atexit run, the same exit status);
- `poll`: the supervisor's exit status, without reaping it (its pid keeps
  naming its process group until the parent killed the group);
- `reap`: reap it, returning its status;
- `exit`, or EOF: exit.

The server itself never runs reference code; it dies with the parent
(PR_SET_PDEATHSIG), and each supervisor then takes its child down with it.
What a forked child shares with the server: the modules already imported
and Python's hash seed.
"""
import json
import os
import signal
import socket
import sys

import supervise   # esverify/oracle/supervise.py: sys.path[0] is this script's folder

del sys.modules["supervise"]   # a clone's own module of that name must not find ours in a forked child
# Python puts the script's folder first, resolved (realpath); __file__ is not: compare both resolved
if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]   # the rest of esverify/oracle/ is not a place the children import from

MAX_PACKET = 1 << 20
#: the contract's float mappings (docs/CONTRACT.md §3): a kept server loads the noise kernels of each
MAPPINGS = ("poly32", "libm64")


def _preload(kept: bool, mappings=MAPPINGS) -> None:
    """What the drivers import first (oracles/child_server.py and the noise hook), once, here; for a
    kept server (`kept`: it forks many children) also what some driver imports at its start. The noise
    kernels of `mappings` only (a run's children draw its --mapping alone; a kept server's, any). Under an
    interpreter without numba (a user's reference environment), what it has: the children draw with numpy,
    or read what the parent drew (docs/parity.md, "Served noise")."""
    import numpy as np
    import torch  # noqa: F401
    if kept:
        # torch.use_deterministic_algorithms imports this on its first call (1 s of CPU); a driver whose
        # reference calls it imports it at its start (docs/references.md §5.2). A run's own server leaves it
        # to that driver (every child would wait for it here); a kept one forks many such children
        import torch._inductor.config  # noqa: F401

    from esverify import exactsum, numerics_probe, rng  # noqa: F401
    from esverify.rng.memo import served_range  # noqa: F401 - the hooks' reader of served noise
    if not rng.backends.numba_available():
        return
    from esverify.rng import numba_backend
    # numba's first call of a kernel loads it from the on-disk cache (a third of a second): once, here. A
    # kernel the parent never ran has no cache in the package (the copy here is read-only) and is compiled
    # (libm64's two kernels 0.6 s of CPU, array_fsum's 0.5 s): so only the kernels the children call
    for mapping in (MAPPINGS if kept else mappings):
        rng.gaussian(1, 4, first=1, mapping=mapping, backend="numba")   # numpy out: no torch op runs here
        getattr(numba_backend, f"{mapping}_pairs")(np.empty(2, np.float32), np.uint64(1))   # large draws
    # the loops' reward (exactsum.loop_rewards): its kernels at their smallest compiled size, so numba
    # loads them. Not array_fsum's: a child reaches it only below that size or past the kernels' length
    # limit, where it sums with math.fsum
    exactsum.squared_distance_fsum(np.zeros(exactsum.SMALLEST_COMPILED), 0.0)


def _seal(pkg: str) -> None:
    """After the preload: the server's package copy read-only, numba's cache folders too (a child's own
    copy keeps them writable), so no child changes what a later one loads from it."""
    for folder, _, _ in os.walk(pkg):
        if os.path.basename(folder) == "__pycache__":
            os.chmod(folder, 0o555)


def _own_copy(pkg: str) -> None:
    """Point the esverify packages the server imported at the child's own copy (`pkg`), so what the
    child imports later comes from its copy, as in a fresh child (what is imported stays the server's:
    the same files, copied from the same place)."""
    for name, module in list(sys.modules.items()):
        if (name == "esverify" or name.startswith("esverify.")) and hasattr(module, "__path__"):
            module.__path__ = [os.path.join(pkg, *name.split("."))]


def _child(request: dict, fds: list, server_fd: int) -> None:
    """In the forked child: become the fresh child the request describes, run the driver, exit."""
    code = 1
    try:
        stdin, out, reply = fds
        reply_fd = max(*fds, server_fd) + 1   # above every fd held here: the dups below clobber none
        os.dup2(reply, reply_fd)
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, reply_fd)             # the received fds and the server's socket: only the four stay
        os.closerange(reply_fd + 1, os.sysconf("SC_OPEN_MAX"))
        supervise.unarm(int(request["max_memory"]), int(request["max_file"]))   # its warnings: to the child's log
        signal.signal(signal.SIGINT, signal.default_int_handler)   # as a fresh interpreter installs it
        os.chdir(request["cwd"])
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        driver = request["argv"][0]
        ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        base = [p for p in sys.path if p not in request["server_pythonpath"]]   # the rest: stdlib, site
        sys.path[:] = [os.path.dirname(driver)] + ours + base
        if ours:
            _own_copy(ours[0])   # the child's private copy comes first in its PYTHONPATH
        sys.argv[:] = list(request["argv"]) + ["--reply-fd", str(reply_fd)]
        sys.dont_write_bytecode = True
        import tempfile
        tempfile.tempdir = None            # gettempdir() reads TMPDIR again
        import random
        random.seed()
        if "numpy.random" in sys.modules:  # a fresh process seeds numpy's global generator from the OS
            sys.modules["numpy.random"].seed()
        import runpy
        try:
            runpy.run_path(driver, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
            import traceback
            traceback.print_exc()
            code = 1
        import atexit
        import threading
        threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - nothing may return into the server's loop
        try:
            import traceback
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code & 0xFF if isinstance(code, int) else 1)


def _spawn(request: dict, fds: list, server_fd: int) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    # the supervisor: a session of its own (its pid names the child's process group), armed as the
    # classic supervisor arms itself, then the child
    try:
        os.setsid()
        os.dup2(fds[1], 1)   # the supervisor writes to the child's log, as a fresh one does
        os.dup2(fds[1], 2)
        subreaper = supervise.arm(int(request["server_pid"]))
        child = os.fork()
        if child == 0:
            _child(request, fds, server_fd)
        supervise.watch(child, subreaper)
    except BaseException as exc:  # noqa: BLE001
        sys.stderr.write(f"esverify warm start: the supervisor failed: {exc}\n")
    os._exit(125)


def _status(status: int):
    """The return code as subprocess reports it: the exit status, or minus the signal."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _poll(pid: int):
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)   # ChildProcessError: not ours
    if info is None:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


def _reap(pid: int):
    waited, status = os.waitpid(pid, os.WNOHANG)   # ChildProcessError: not ours, or reaped already
    return None if waited == 0 else _status(status)


def serve(sock: socket.socket) -> None:
    # the server's own PYTHONPATH (its private package folder): what a child's sys.path replaces
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 8)
        except OSError:
            return
        if not data:
            return
        request = {}
        try:
            request = json.loads(data)
            op = request.get("op")
            if op == "spawn":
                if len(fds) != 3:
                    raise ValueError(f"spawn needs 3 fds (stdin, output, reply), got {len(fds)}")
                request.update(server_pid=os.getpid(), server_pythonpath=pythonpath)
                answer = {"pid": _spawn(request, fds, sock.fileno())}
            elif op == "poll":
                answer = {"code": _poll(int(request["pid"]))}
            elif op == "reap":
                answer = {"code": _reap(int(request["pid"]))}
            elif op == "exit":
                return
            else:
                answer = {"error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - a failed request is an answer, not the server's end
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        answer["id"] = request.get("id") if isinstance(request, dict) else None   # the parent matches it
        sock.send(json.dumps(answer).encode())


def main(argv) -> None:
    opts = dict(a.split("=", 1) for a in argv)
    parent = int(opts["--parent"])
    supervise._prctl(supervise.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
    sock = socket.socket(fileno=int(opts["--socket-fd"]))
    mappings = opts.get("--mappings", ",".join(MAPPINGS)).split(",")
    import gc
    # no automatic collection while the imports run: each full one walked everything imported so far
    # (0.8 s of the server's 3.4 s of CPU in a gc callback's count); one collection after them instead
    gc.disable()
    _preload(opts.get("--kept") == "1", tuple(m for m in MAPPINGS if m in mappings))
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pythonpath:
        _seal(pythonpath[0])
    gc.collect()
    gc.freeze()   # what is alive now is shared with every child: the collector leaves it alone (fewer copied pages)
    gc.enable()   # a forked child collects as a fresh interpreter does
    sock.send(json.dumps({"hello": "warm-start", "pid": os.getpid(), "python": sys.version.split()[0]}).encode())
    serve(sock)


if __name__ == "__main__":
    main(sys.argv[1:])
