"""`python -m gpucli` and the `gpucli` console script.

This module imports nothing at its top. A spawned reader or worker re-runs the script that
started the run (as `__mp_main__`) before it does anything else; with `gpucli.app.cli:main` as the
script's entry, every such process imported typer and rich for nothing (~0.2 s of CPU each).

Its first instruction makes a stop exit at once with one line (gpucli/core/signals.py): a Ctrl-C
during the imports below printed a KeyboardInterrupt traceback, and a SIGTERM before a command's
guard killed the process without a word. What is left is the interpreter's own start,
before this function runs (a few tens of milliseconds), which no Python code can reach.
"""


def main() -> None:
    from gpucli.core.signals import exit_at_once

    exit_at_once()
    import sys

    from gpucli.app import entry

    entry.note(sys.argv[1:])  # `gpucli embed`: only embed's command is built (gpucli/app/entry.py)
    from gpucli.app.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
