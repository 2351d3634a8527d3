"""benchmarks/ says what it holds: every script is in its catalogue (benchmarks/catalogue.py), which
`python benchmarks/run.py --list` prints, and benchmarks/README.md's table is that catalogue, the
date of each script's last figure as read from where the figure is kept."""

from __future__ import annotations

import re

from benchmarks.catalogue import HERE, SCRIPTS, last_figure

ROW = re.compile(r"^\| `([\w.]+)` \| (\w+) \| (.+) \| (.+) \| (.+) \|$", re.M)


def test_every_script_of_benchmarks_is_in_the_catalogue_once():
    files = sorted(p.name for p in HERE.iterdir() if p.suffix in (".py", ".sh") and p.name not in
                   ("__init__.py", "catalogue.py"))
    listed = [s.file for s in SCRIPTS]
    assert sorted(listed) == files and len(set(listed)) == len(listed)


def test_the_readme_table_is_the_catalogue_with_each_last_figure_s_date():
    rows = {m[0]: m[1:] for m in ROW.findall((HERE / "README.md").read_text(encoding="utf-8"))}
    expected = {s.file: (s.role, s.measures, s.kept_in or "-", last_figure(s) or "-") for s in SCRIPTS}
    assert rows == expected


def test_every_figure_script_names_where_its_figures_are_kept():
    for script in SCRIPTS:
        if script.role != "helper":
            assert script.kept_in and last_figure(script), script.file
