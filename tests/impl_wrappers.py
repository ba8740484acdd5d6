"""Misbehaving protocol wrappers for tests/test_impl_protocol.py (run as a script, never imported by pytest).

`python tests/impl_wrappers.py MODE` serves the clean-room RNG operations (numpy
backend: no torch, no numba, so it starts in a fraction of a second) except
for the fault MODE names:

- ok: no fault;
- silent: never answers anything (spawns a grandchild first, to prove the
  process group is killed);
- garbage: answers every request with text, not frames;
- version: claims RNG contract version 99;
- dies: exits (status 3) on the gaussian request with n == 33;
- hangs: sleeps forever on the gaussian request with n == 33;
- stray: prints a debug line to stdout before answering gaussian n == 33;
- refuses: replies ok:false to gaussian n == 33;
- partial: claims only `at` (everything else is unsupported);
- crashes: answers capabilities, then exits on every request;
- badat: exits on every `at` request (restarts and give-up are per operation);
- bigclaim: on gaussian n == 33, announces an 8 GiB reply, writes 100 bytes of it and exits;
- deep / bigint / badutf8: on gaussian n == 33, replies with a frame whose header nests 100,000
  brackets deep / holds a 5000-digit integer / is not UTF-8 (outside JSON).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from esverify.impl import server  # noqa: E402
from esverify.impl.wire import parse_hex  # noqa: E402


def main(mode: str) -> int:
    # written out (not server.trainer_capabilities(), which imports torch for the profile versions)
    caps = {"protocol": 1, "implementation": {"name": f"test-{mode}", "version": "0"}, "contract_version": 1,
            "profiles": {}, "operations": ["at", "member_seed", "stream_seed", "gaussian"],
            "mappings": ["poly32", "libm64"], "dtypes": [], "schemes": ["iid", "correlated"], "shapings": [],
            "decays": [], "restores": [], "antithetic": True}
    handlers = server.trainer_handlers("numpy")
    if mode == "silent":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        time.sleep(600)
        return 0
    if mode == "garbage":
        sys.stdin.buffer.read(16)
        sys.stdout.write("hello, I am not a frame\n")
        sys.stdout.flush()
        time.sleep(600)
        return 0
    if mode == "version":
        caps["contract_version"] = 99
    if mode == "partial":
        caps["operations"] = ["at"]
    if mode == "crashes":
        handlers = {op: (lambda args: os._exit(4)) for op in handlers}
    if mode == "badat":   # only `at` is faulty: the other operations must still be checked
        handlers["at"] = lambda args: os._exit(6)
    gaussian = handlers["gaussian"]

    def faulty(args):
        if parse_hex(args["n"], "n") == 33:
            if mode == "dies":
                os._exit(3)
            if mode == "hangs":
                time.sleep(600)
            if mode == "stray":
                sys.stdout.write("debug: computing gaussian\n")
                sys.stdout.flush()
            if mode == "bigclaim":
                head = b'{"id":0,"ok":true,"result":{}}'
                sys.stdout.buffer.write(b"ESVF" + len(head).to_bytes(4, "little") + (8 << 30).to_bytes(8, "little")
                                        + head + bytes(100))
                sys.stdout.flush()
                os._exit(5)
            bad = {"deep": b'{"id":0,"ok":true,"result":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                   "bigint": b'{"id":0,"ok":true,"result":{"n":' + b"7" * 5000 + b"}}",
                   "badutf8": b'{"id":0,"ok":true,"result":{"n":"\xff\xfe"}}'}.get(mode)
            if bad is not None:
                sys.stdout.buffer.write(b"ESVF" + len(bad).to_bytes(4, "little") + bytes(8) + bad)
                sys.stdout.flush()
                time.sleep(600)   # esverify must kill it: the frame was a protocol error
            if mode == "refuses":
                raise ValueError("n = 33 is refused on purpose")
        return gaussian(args)

    handlers["gaussian"] = faulty
    return server.serve(handlers, caps)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
