"""The commands beside the tasks': `models`, `search`, `inspect`, `snapshot` and `compact`, their options and help.

Each parses its flags and hands the work to gpucli/commands/ (search, inspect) or the task
registry (models), imported when the command runs: `gpucli --help` imports none of it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from gpucli.app.boundary import exit_codes
from gpucli.app.help import PlainCommand, escape
from gpucli.core.terminal import fit

SEARCH_HELP = ("Show the chunks of an embed output nearest to QUERY: by cosine similarity (Hamming distance for "
               "binary vectors), BM25 with --mode sparse, or both fused by rank with --mode hybrid.\n\n"
               "\b\nExamples:\n"
               "  gpucli search \"how do bees make honey\" --in embed.parquet\n"
               "  gpucli search \"tidal forces\" --in qdrant:./qdrant_data/docs -k 3 --json\n"
               "  gpucli search \"a red car at night\" --in photos.parquet   # made with an image-text model\n"
               "  gpucli search --image query.jpg --in photos.parquet\n"
               "  gpucli search \"ZX-4471Q pump\" --in embed.parquet --mode hybrid   # made with --sparse bm25\n\n"
               "The query is embedded with the model the output was made with (named in its metadata). A Parquet "
               "dataset or a JSON lines file is scanned in batches with bounded memory; Qdrant searches itself.")
SEARCH_EXIT = ("Exit codes: 0 done; 1 the search failed (e.g. Qdrant unreachable); 2 bad usage or not an embed "
               "output; 3 internal error; 130 interrupted.")
INSPECT_HELP = ("Describe a gpucli output: task, model, rows, inputs done, failures, the last run, and the task's "
                "own settings.\n\n"
                "\b\nExamples:\n  gpucli inspect embed.parquet\n  gpucli inspect rows.jsonl --json\n"
                "  gpucli inspect qdrant:./qdrant_data/docs\n\n"
                "Reads only: the ledger is opened read-only and the run lock is not taken, so it works while a run "
                "writes the output.")
INSPECT_EXIT = "Exit codes: 0 done; 2 not a gpucli output (or unreadable); 3 internal error."
SNAPSHOT_HELP = ("Pack an embedded Qdrant collection (qdrant:PATH/COLLECTION, a Qdrant Edge shard) as a Qdrant shard "
                 "snapshot FILE, which a Qdrant server restores into a collection with the same vectors.\n\n"
                 "\b\nExamples:\n  gpucli snapshot qdrant:./qdrant_data/docs docs.snapshot\n"
                 "  gpucli snapshot qdrant:./qdrant_data/docs docs.snapshot --json\n\n"
                 "It prints the server's calls that restore it (docs/qdrant.md). The collection is locked while it "
                 "is packed: a run or a search that opens it meanwhile stops with exit 75.")
COMPACT_HELP = ("Fold the small parts of a Parquet output into larger ones (up to 128 MiB each), so that its readers "
                "open few files. A run does it itself once an output holds 50 small parts; this does it now.\n\n"
                "\b\nExamples:\n  gpucli compact embed.parquet\n  gpucli compact embed.parquet --json\n\n"
                "Exactly once, like a run: a kill at any moment leaves every row once and readable, and a reader "
                "sees the parts before or after, never both (docs/outputs-and-columns.md).")
COMPACT_EXIT = "Exit codes: 0 done (or nothing to fold); 2 not a gpucli output; 3 disk full or internal error; 75 a " \
    "run is writing the output."
SNAPSHOT_EXIT = ("Exit codes: 0 done; 2 bad usage or no such collection; 3 the file could not be written (disk full) "
                 "or internal error; 75 the collection is in use.")


def register(app: typer.Typer) -> None:
    """`models`, `search`, `inspect`, `snapshot` and `compact` on the app, in the order `gpucli --help` lists them."""
    app.command(cls=PlainCommand)(models)
    app.command(cls=PlainCommand, help=escape(SEARCH_HELP), epilog=escape(SEARCH_EXIT))(search)
    app.command(name="inspect", cls=PlainCommand, help=escape(INSPECT_HELP), epilog=escape(INSPECT_EXIT))(
        inspect_command)
    app.command(name="snapshot", cls=PlainCommand, help=escape(SNAPSHOT_HELP), epilog=escape(SNAPSHOT_EXIT))(
        snapshot_command)
    app.command(name="compact", cls=PlainCommand, help=escape(COMPACT_HELP), epilog=escape(COMPACT_EXIT))(
        compact_command)


def models(json_out: Annotated[bool, typer.Option("--json", help="One JSON object per model on stdout.")] = False,
           ) -> None:
    """List model aliases: task, backend, and whether each loads offline on this machine.

    Any local model directory or Hugging Face id in the local cache works with --model too.
    """
    with exit_codes():
        from gpucli.tasks import all_tasks  # every task's module: only when the list is asked for

        entries = [entry for task_cls in all_tasks().values() for entry in task_cls.models()]
        rows = [{"alias": e.alias, "task": e.task, "backend": e.backend, "available": bool(e.available()),
                 "description": e.description,
                 "default": e.alias == all_tasks()[e.task].default_model} for e in entries]
        if json_out:
            for row in rows:
                print(json.dumps(row))
            return
        models_table(rows)


def models_table(rows: list[dict[str, Any]], console: Any = None) -> None:
    """The models on stdout, two lines each (alias, task, offline, backend; then the description
    wrapped on words), so that an alias is never cut at 80 columns, whatever the descriptions
    hold. Text, never markup: a description such as "gpucli[funasr]" must print its brackets."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    width = console.width
    alias_w = max((len(r["alias"]) + 2 for r in rows), default=5)
    task_w = max((len(r["task"]) for r in rows), default=4)
    head = f"{'alias':<{alias_w}} {'task':<{task_w}} {'offline':<7} backend"
    console.print(Text(head, style="bold"), soft_wrap=True)
    for r in rows:
        alias = r["alias"] + (" *" if r["default"] else "")
        line = f"{alias:<{alias_w}} {r['task']:<{task_w}} {'yes' if r['available'] else 'no':<7} {r['backend']}"
        console.print(Text(fit(line, width, " " * (alias_w + task_w + 10))), soft_wrap=True)
        console.print(Text(fit("    " + r["description"], width, ""), style="dim"), soft_wrap=True)
    console.print(Text(fit("* the task's default model; any local model directory or Hugging Face id works with "
                           "--model too", width, "  ")), soft_wrap=True)


def search(
    source: Annotated[str, typer.Option("--in", "-i", show_default=False, metavar="PATH|URL",
                                        help="An embed output: DIR.parquet, FILE.jsonl, "
                                             "qdrant://HOST:PORT/COLLECTION or qdrant:PATH/COLLECTION.")],
    query: Annotated[str, typer.Argument(help="What to look for, in words.", show_default=False, metavar="QUERY")] = "",
    k: Annotated[int, typer.Option("-k", "--top-k", help="How many chunks to show.", metavar="INTEGER")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per hit on stdout (rank, score, path, "
                                                          "chunk, char_start, char_end, text).")] = False,
    image: Annotated[str, typer.Option("--image", metavar="FILE", show_default=False,
                                       help="Look for what is nearest to this image instead of words (an output "
                                            "made with an image-text model: CLIP, SigLIP).")] = "",
    mode: Annotated[str, typer.Option("--mode", metavar="dense|sparse|hybrid", help=(
        "dense: cosine of the vectors; sparse: BM25 over the sparse vectors of an output made with --sparse bm25 "
        "(IDF from the output itself, or Qdrant's); hybrid: both top lists fused by reciprocal rank, score = sum "
        "of 1/(60 + rank)."))] = "dense",
) -> None:
    """The nearest chunks (help: SEARCH_HELP)."""
    with exit_codes():
        from gpucli.commands import search as searching  # the query's model and the reader: when it runs

        result = searching.search(source, query, k, image, mode)
        searching.render(result, json_out)


def inspect_command(
    out: Annotated[str, typer.Argument(help="A gpucli output: DIR.parquet, FILE.jsonl or qdrant:PATH/COLLECTION.",
                                       show_default=False, metavar="OUT")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """What an output holds (help: INSPECT_HELP)."""
    with exit_codes():
        from gpucli.commands import inspect as inspecting  # the ledger and the sink: when it runs

        inspecting.render(inspecting.inspect_output(out), json_out)


def snapshot_command(
    collection: Annotated[str, typer.Argument(help="An embedded collection: qdrant:PATH/COLLECTION.",
                                              show_default=False, metavar="COLLECTION")],
    file: Annotated[str, typer.Argument(help="The snapshot file to write.", show_default=False, metavar="FILE")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """An embedded collection as a shard snapshot (help: SNAPSHOT_HELP)."""
    with exit_codes():
        from gpucli.commands import snapshot as snapshotting  # Qdrant Edge: when it runs

        snapshotting.render(snapshotting.snapshot(collection, file), json_out)


def compact_command(
    out: Annotated[str, typer.Argument(help="A Parquet output of gpucli: DIR.parquet.", show_default=False,
                                       metavar="OUT")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Small parts folded into larger ones (help: COMPACT_HELP)."""
    with exit_codes():
        from gpucli.commands import compact as compacting  # the sink and the ledger: when it runs

        compacting.render(compacting.compact(out), json_out)
