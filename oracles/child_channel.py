"""The child's end of the oracle channel's line protocol, torch-free (docs/references.md §3).

Runs ONLY in a parity child; the esverify package never imports it. Shared by oracles/child_server.py
(the runtime of the torch references' drivers) and by a driver that speaks the protocol itself because
its interpreter need not have torch (hyperscale-es's, a JAX child): the options every driver is started
with, the reply pipe, and the loop that reads one JSON command per line on stdin and writes one JSON
answer per line on the reply pipe, until "exit" or EOF. What a command does, and what an answer carries
besides its "id", is the caller's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def arguments(argv=None) -> argparse.Namespace:
    """The options every driver is started with: --clone PATH, --reply-fd N and --line-coverage (parity
    --line-coverage); `argv` default sys.argv[1:]. Exits 2 (argparse) on others."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--clone", required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--line-coverage", action="store_true")
    return parser.parse_args(argv)


def reply_pipe(fd: int):
    """The reply pipe `fd` as a line-buffered text file. Not inherited by the processes the reference
    starts: a reply channel held open by a grandchild would hide this process's death from the parent."""
    os.set_inheritable(fd, False)
    return os.fdopen(fd, "w", buffering=1)


def answer_commands(reply, respond, lines=None) -> None:
    """Until an "exit" command or EOF: each non-blank line of `lines` (default: stdin) is a JSON command;
    respond(command, answer) fills `answer` ({"id": the command's id} when called), which then goes to
    `reply` as one JSON line. stdout (the child's log) is flushed after each answer, so that what the
    reference printed for a command is in the log when the parent reads its reply."""
    for line in sys.stdin if lines is None else lines:
        if not line.strip():
            continue
        command = json.loads(line)
        if command.get("op") == "exit":
            break
        answer = {"id": command.get("id")}
        respond(command, answer)
        reply.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
