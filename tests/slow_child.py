"""A spawned child's target whose import is slow, as importing torch and transformers is: the
window between a child's start and its entry, where a group's signal once killed workers."""

import os
import time
from pathlib import Path

if os.environ.get("GPUCLI_TEST_IMPORTING"):  # set by the test; any other import is instant
    Path(os.environ["GPUCLI_TEST_IMPORTING"]).touch()  # the child is unpickling its target now
    time.sleep(float(os.environ.get("GPUCLI_TEST_IMPORT_S", "1.5")))


def main() -> None:
    from gpucli.core.signals import leave_to_parent

    leave_to_parent()
    time.sleep(0.3)  # a signal dropped while blocked must not arrive late either
