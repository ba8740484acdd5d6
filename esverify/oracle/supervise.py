"""The supervisor between the parity parent and a reference child.

Run BY PATH under the parent's own interpreter (`python -I supervise.py
[limits] -- CHILD ARGV...`), stdlib only, as the leader of a new session.
It:

- makes itself a child subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`),
  so every process the reference starts, even one that calls `setsid()`
  to leave the process group, is re-parented to it when its own parent
  dies, instead of escaping to init;
- asks for SIGTERM when the parent dies (`PR_SET_PDEATHSIG`), so a
  parent killed outright still takes the reference down with it;
- forks the child, applies the resource limits to it only (RLIMIT_DATA
  for --max-memory, RLIMIT_FSIZE for the largest file it may write,
  RLIMIT_CORE 0) and execs it;
- when the child exits, or on SIGTERM/SIGHUP/SIGINT, kills the child's
  process group and then, round after round, every process re-parented
  to it, until none is left; then exits with the child's own status (the
  same exit code, or dies of the same signal), so the parent reports the
  reference's real exit status.

Where the OS offers no subreaper (not Linux), only the process group is
killed: a `setsid()` escape survives there (docs/parity.md, "Trust model").
"""
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
REAP_SECONDS = 10.0   #: bound on the kill rounds (a fork bomb racing the kills)

_child = None


def _prctl(option, value) -> bool:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children(me: int) -> list:
    """Pids whose parent is `me` (scans /proc; [] where there is none)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(name))
    return found


def kill_all(leader) -> int:
    """Kill the child's group, then every (re-parented) child of ours until none is left; returns how
    many processes besides the child were killed."""
    if leader is not None:
        try:
            os.killpg(leader, signal.SIGKILL)
        except OSError:
            pass
    me, extra, seen = os.getpid(), 0, set()
    deadline = time.monotonic() + REAP_SECONDS
    while time.monotonic() < deadline:
        kids = _children(me)
        for pid in kids:
            if pid != leader and pid not in seen:
                seen.add(pid)
                extra += 1
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break          # no child at all: every descendant is gone (they were all re-parented to us)
        if pid == 0:
            time.sleep(0.01)
    return extra


def _on_signal(signum, frame):
    kill_all(_child)
    os._exit(128 + signum)


def _set_limits(max_memory: int, max_file: int):
    import resource
    for name, value in (("RLIMIT_DATA", max_memory), ("RLIMIT_FSIZE", max_file), ("RLIMIT_CORE", 0)):
        limit = getattr(resource, name, None)
        if limit is None or value < 0:
            continue
        try:
            hard = resource.getrlimit(limit)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError) as exc:
            sys.stderr.write(f"esverify supervisor: cannot set {name}={value}: {exc}\n")


def arm(parent: int) -> bool:
    """Make this process the supervisor: a child subreaper, SIGTERM when its parent dies, the kill-all
    signal handlers. Exits at once when `parent` (non-zero) is no longer its parent (it died before
    PDEATHSIG was armed). Returns whether the OS made it a subreaper."""
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    if parent and os.getppid() != parent:     # the parent died before PDEATHSIG was armed
        os._exit(128 + signal.SIGTERM)
    return subreaper


def unarm(max_memory: int, max_file: int) -> None:
    """In the forked child, before it runs anything: the default signal handlers, the resource limits."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    _set_limits(max_memory, max_file)


def main(argv) -> None:
    split = argv.index("--")
    opts = dict(a.split("=", 1) for a in argv[:split])
    command = argv[split + 1:]
    subreaper = arm(int(opts.get("--parent", "0")))
    pid = os.fork()
    if pid == 0:
        try:
            unarm(int(opts.get("--max-memory", "-1")), int(opts.get("--max-file", "-1")))
            os.execv(command[0], command)
        except BaseException as exc:  # noqa: BLE001 - nothing may return into the supervisor's code
            sys.stderr.write(f"esverify supervisor: cannot start {command[0]!r}: {exc}\n")
            os._exit(127)
    watch(pid, subreaper)


def watch(pid: int, subreaper: bool) -> None:
    """Supervise the forked child `pid` until it exits: hold none of its channel, wait for it, kill what
    it left behind, then exit with its status (never returns)."""
    global _child
    _child = pid
    # the supervisor holds none of the channel: EOF on stdin or the reply pipe must mean the child
    try:
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
    except (OSError, ValueError):
        os.closerange(3, 1024)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    status = None
    while status is None:
        try:
            waited, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if waited == pid:
            status = st
    extra = kill_all(pid)
    if extra:
        how = "" if subreaper else " (no subreaper on this OS: processes that left the group may survive)"
        sys.stderr.write(f"\nesverify supervisor: the reference left {extra} process(es) running after it "
                         f"ended; killed them{how}\n")
    sys.stderr.flush()
    if status is None:
        os._exit(125)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)
        try:
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, ValueError, OSError):
            pass
        signal.signal(sig, signal.SIG_DFL) if sig not in (signal.SIGKILL, signal.SIGSTOP) else None
        os.kill(os.getpid(), sig)
        time.sleep(1)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125)


if __name__ == "__main__":
    main(sys.argv[1:])
