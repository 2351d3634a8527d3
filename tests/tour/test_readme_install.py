"""A new user's tour, on the README install alone (tests/tour/conftest.py): the quick start, then
every command README.md and docs/ show that needs no extra, run for real in the order the pages
show them (README first, then docs/ by name), in one directory, as a user who follows the pages
would; each output read back with plain pyarrow (`to_pylist()`, no pandas), each search and
inspect run on what the commands before them made. A command whose gpucli code tried to import
a package the README install lacks fails the tour, whatever its exit code (tests/tour/audit).

The examples that need an extra (`<!-- extra: ... -->`) are left to tests/integration/test_docs.py.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.shown_commands import QUICK_START, RUNNABLE, TASKS, Shown

pytestmark = [pytest.mark.tour, pytest.mark.model, pytest.mark.slow, pytest.mark.processes]

TOURED = [s for s in RUNNABLE if not s.extra]
READ_BACK = """
import json, sys
import pyarrow.parquet as pq
out = sys.argv[1]
if out.endswith(".jsonl"):
    rows = [json.loads(line) for line in open(out, encoding="utf-8") if line.strip()]
else:
    rows = pq.read_table(out).to_pylist()
assert "pandas" not in sys.modules, "reading the output imported pandas"
print(json.dumps({"rows": len(rows), "columns": sorted(rows[0]) if rows else [], "paths": sorted({r["path"] for r in rows})}))
"""


@dataclass
class Ran:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    lacking: list[str]  # packages the README install lacks that gpucli's code tried to import

    def why(self) -> str:
        return f"gpucli {shlex.join(self.argv)} -> {self.returncode}\n{self.stderr[-3000:]}"


class Tour:
    """A user's directory (sample_data/, configs/, two small tables) and the README install's gpucli."""

    def __init__(self, install, home: Path) -> None:
        self.install = install
        self.home = home
        self.count = 0

    def gpucli(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> Ran:
        self.count += 1
        log = self.home.parent / f"imports-{self.count}.txt"
        full = {**self.install.env(log), **(env or {})}
        done = subprocess.run(["gpucli", *argv], cwd=self.home, env=full, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        return Ran(argv, done.returncode, done.stdout, done.stderr, self._lacking(log))

    def _lacking(self, log: Path) -> list[str]:
        """What gpucli's own code tried to import that the README install lacks."""
        own = str(ROOT / "gpucli")
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        asked = {name: where for name, _, where in (line.partition("\t") for line in lines)}
        return sorted(f"{name} (from {where})" for name, where in asked.items()
                      if name in self.install.lacks and where.startswith(own))

    def read_back(self, out: str) -> dict:
        """The output's rows through plain pyarrow (or json), in the README install's Python."""
        done = subprocess.run([str(self.install.python), "-c", READ_BACK, out], cwd=self.home, capture_output=True,
                              text=True, timeout=120, env=self.install.env(self.home.parent / "read-back.txt"))
        assert done.returncode == 0, f"reading {out} back with plain pyarrow: {done.stderr[-2000:]}"
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def tour(readme_install, tmp_path_factory) -> Tour:
    import pyarrow as pa
    import pyarrow.parquet as pq

    home = tmp_path_factory.mktemp("tour") / "home"
    home.mkdir()
    shutil.copytree(ROOT / "sample_data", home / "sample_data")
    shutil.copytree(ROOT / "configs", home / "configs")
    pq.write_table(pa.table({"id": [1, 2], "body": ["Bees make honey from nectar.", "Rivers run to the sea."]}),
                   home / "posts.parquet")
    (home / "posts.csv").write_text("id,body\n1,Bees make honey from nectar.\n2,Rivers run to the sea.\n")
    return Tour(readme_install, home)


def _out_of(argv: list[str]) -> str | None:
    """The output a task command writes (its --out, else TASK.parquet); None for a dry run."""
    if "--dry-run" in argv:
        return None
    if "--out" in argv:
        return argv[argv.index("--out") + 1]
    return f"{argv[0]}.parquet"


def test_the_quick_start_runs_on_the_readme_install_on_onnx_runtime_and_plain_pyarrow_reads_it(tour):
    """The README's first command's second half, exactly (the install is the fixture's)."""
    ran = tour.gpucli(shlex.split(QUICK_START)[1:])
    assert ran.returncode == 0, ran.why()
    assert not ran.lacking, f"tried to import what the README install lacks: {ran.lacking}"
    assert "(onnx)" in ran.stderr.splitlines()[0], f"not the fast path: {ran.stderr.splitlines()[0]}"
    assert "note:" not in ran.stderr, ran.stderr  # no fallback said
    read = tour.read_back("embed.parquet")
    assert read["rows"] > 0 and {"path", "embedding", "mtime", "text"} <= set(read["columns"])


@pytest.mark.parametrize("shown", TOURED, ids=lambda s: s.id)
def test_every_command_the_docs_show_runs_on_the_readme_install(shown: Shown, tour):
    argv = list(shown.argv)
    ran = tour.gpucli(argv, dict(shown.env))
    assert ran.returncode == shown.exits, f"{shown.id}: {ran.why()}"
    assert not ran.lacking, f"{shown.id}: gpucli {shlex.join(argv)} tried to import {ran.lacking}, which the README install lacks"
    out = _out_of(argv) if argv[0] in TASKS else None
    if out and not out.startswith("qdrant:") and ran.returncode == 0:
        read = tour.read_back(out)
        assert read["rows"] > 0, f"{shown.id}: {out} holds no rows"
    if out and out.startswith("qdrant:") and ran.returncode == 0:
        inspected = tour.gpucli(["inspect", out, "--json"])
        assert inspected.returncode == 0 and not inspected.lacking, inspected.why()
        assert json.loads(inspected.stdout)["rows"] > 0


def test_search_finds_the_quick_start_s_chunks_in_parquet_json_lines_and_embedded_qdrant(tour):
    for out in ("embed.parquet", "docs.jsonl", "qdrant:./qdrant_data/docs"):
        ran = tour.gpucli(["search", "how do bees make honey", "--in", out, "-k", "3", "--json"])
        assert ran.returncode == 0 and not ran.lacking, ran.why()
        hits = [json.loads(line) for line in ran.stdout.splitlines()]  # a JSON line a hit
        assert len(hits) == 3 and all(hit["path"] for hit in hits), ran.stdout


def test_a_cron_style_rerun_of_the_quick_start_reads_nothing_again_and_says_so_in_json(tour):
    """As cron runs it: stdin and stdout not a terminal, plain progress, the summary as JSON."""
    ran = tour.gpucli([*shlex.split(QUICK_START)[1:], "--json", "--progress", "plain"])
    assert ran.returncode == 0 and not ran.lacking, ran.why()
    summary = json.loads(ran.stdout.strip().splitlines()[-1])
    assert summary["exit_code"] == 0 and summary["succeeded"] == 0 and summary["failed"] == 0
    assert summary["skipped"] == summary["inputs"] > 0


def test_subtitles_and_word_times_come_out_of_the_readme_install(tour):
    ran = tour.gpucli(["transcribe", "sample_data/wavs", "--out", "tour-words.parquet", "--subtitles", "srt",
                       "--word-timestamps"])
    assert ran.returncode == 0 and not ran.lacking, ran.why()
    read = tour.read_back("tour-words.parquet")
    assert "words" in read["columns"] and read["rows"] > 0
    srt = sorted((tour.home / "tour-words.subtitles").rglob("*.srt"))
    assert len(srt) == read["rows"] and all(" --> " in f.read_text() for f in srt if f.stat().st_size)


def test_the_import_audit_names_the_file_whose_code_asked_and_ignores_find_spec_probes(readme_install, tmp_path):
    """The tour's own instrument: an import statement that fails inside a file is logged with
    that file; importlib.util.find_spec (how most libraries look for an optional package) is not."""
    script = tmp_path / "asker.py"
    script.write_text("import importlib.util\nimportlib.util.find_spec('probed_only_xyz')\n"
                      "try:\n    import missing_pkg_xyz\nexcept ImportError:\n    pass\n")
    log = tmp_path / "imports.txt"
    done = subprocess.run([str(readme_install.python), str(script)], env=readme_install.env(log), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    asked = dict(line.split("\t") for line in log.read_text().splitlines())
    assert asked["missing_pkg_xyz"] == str(script) and "probed_only_xyz" not in asked
