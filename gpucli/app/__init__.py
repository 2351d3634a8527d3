"""The command line: the Typer app, its help text and what the console script was asked to run."""
