"""Typed calls for tests/integration/test_sandbox.py, and the handler its sandbox's children run
(a module-level function, pickled by reference as the documents' `calls.run` is)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from gpucli.core.errors import InputError


@dataclass(frozen=True)
class Echo:
    text: str


@dataclass(frozen=True)
class Refuse:
    reason: str


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Die:
    pass


@dataclass(frozen=True)
class Allocate:
    nbytes: int


@dataclass(frozen=True)
class Bug:
    pass


@dataclass(frozen=True)
class Pid:
    pass


def act(call: object) -> object:
    match call:
        case Echo(text=text):
            return text
        case Refuse(reason=reason):
            raise InputError("decode", reason)
        case Sleep(seconds=seconds):
            time.sleep(seconds)
            return "slept"
        case Die():
            os._exit(9)
        case Allocate(nbytes=nbytes):
            return len(bytearray(nbytes))
        case Bug():
            return 1 / 0
        case Pid():
            return os.getpid()
    raise TypeError(call)
