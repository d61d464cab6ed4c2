#!/usr/bin/env python3
"""The short soak test: bench/soak.py for 45 seconds with 16 clients against $CINFER_BIN (the build under test).

Random completions and chat requests, streaming or not, mid-stream disconnects, invalid requests and
deterministic requests, on a KV pool small enough to force preemption (see bench/soak.py).  Only correctness
is asserted, never timing: every answer well-formed, every invalid request refused with the right status,
the deterministic answers identical to the idle server's, preemption happened, the engine idle again after the
load, RSS bounded, no sanitizer report, exit 0 on SIGTERM.  soak.py prints one PASS/FAIL line per check."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from server_util import BIN, STORIES, setup_ok  # noqa: E402


def main():
    if not setup_ok("soak"):
        return 1
    out = tempfile.mkdtemp(prefix="cinfer-soak-")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "soak.py"), "--seconds", "45", "--clients", "16",
           "--binary", BIN, "--model", STORIES, "--seed", "1", "--out", out, "--idle-timeout", "30",
           "--threads", "1", "--lines"]
    rc = subprocess.call(cmd)
    if rc == 0:
        shutil.rmtree(out, ignore_errors=True)
    else:
        print(f"soak files kept in {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
