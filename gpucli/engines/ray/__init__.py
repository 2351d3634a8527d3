"""`--engine ray`: the same tasks, sinks and core (`gpucli.engines.job`, `gpucli.output.accounts`) on Ray Data.

    connection.py  join a cluster or start a private local Ray; Ray Data settings and retries
    planning.py    how many actors, with what resources
    actors.py      the reader and predictor stages and the rows between them
    readiness.py   how the driver learns a predictor actor loaded the model (--setup-timeout-s)
    driver.py      the walk, and the results fed to the core's Accounts (`run`)
"""

from __future__ import annotations

from .connection import connect, start_local
from .driver import RayJob, run
from .planning import Plan, make_plan, plan_for

__all__ = ["Plan", "RayJob", "connect", "make_plan", "plan_for", "run", "start_local"]
