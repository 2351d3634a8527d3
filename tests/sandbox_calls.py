"""A function for tests/test_limited.py to run in LimitedPool's children (importable by name)."""

from __future__ import annotations

import os
import time

from gpucli.core.errors import InputError


def act(kind: str, arg: str):
    if kind == "echo":
        return arg
    if kind == "input":
        raise InputError("decode", arg)
    if kind == "sleep":
        time.sleep(float(arg))
        return "slept"
    if kind == "die":
        os._exit(9)
    if kind == "allocate":
        return len(bytearray(int(arg)))
    if kind == "bug":
        return 1 / 0
    if kind == "pid":
        return os.getpid()
    raise ValueError(kind)
