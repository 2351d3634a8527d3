"""What the console script was asked to run, noted before `gpucli.app.cli` is imported.

`gpucli embed DIR` builds the command line of the one task it runs: importing every task module
to register its command cost ~0.25 s of the start, before the workers could be spawned (classify
and transcribe import their own libraries). `gpucli.__main__` sets `invoked` from argv;
`gpucli.app.cli` imported any other way (tests, a library user) registers every task, as before.
"""

from __future__ import annotations

invoked: str | None = None


def note(argv: list[str]) -> None:
    """The first argument that is not an option: the command's name (root options are only
    --version and --help, which take no value)."""
    global invoked
    invoked = next((arg for arg in argv if not arg.startswith("-")), None)
