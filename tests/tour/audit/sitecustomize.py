"""Loaded by every Python process of the tour (PYTHONPATH names this folder): records each
top-level package an import asks for, the first time, with the file whose code asked, into the
file that GPUCLI_TOUR_IMPORT_LOG names ("package<TAB>file" a line). The tour fails on a package
the README install lacks that gpucli's own code tried to import (tests/tour/test_readme_install.py):
a fallback that swallowed the ImportError shows up here, where the command's exit code would not.
Libraries' own probes for optional speed-ups (qdrant-client trying orjson) are the libraries'
business; `importlib.util.find_spec` raises no audit event at all."""

import os
import sys

_LOG = os.environ.get("GPUCLI_TOUR_IMPORT_LOG")
_SEEN: set[str] = set()
_MACHINERY = ("<frozen importlib", os.path.join("importlib", "__init__.py"))


def _asked_by() -> str:
    """The file of the first frame outside the import machinery and this hook."""
    frame = sys._getframe(1).f_back  # _audit's caller: the import's own frame, or the machinery's
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY[0]) or (
            frame is not None and frame.f_code.co_filename.endswith(_MACHINERY[1])):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def _audit(event: str, args: tuple) -> None:
    if event != "import":
        return
    top = str(args[0]).partition(".")[0]
    if top in _SEEN or top in sys.modules:
        return
    _SEEN.add(top)
    try:  # never the import's problem: an exception here would fail the import itself
        with open(_LOG, "a", encoding="utf-8") as log:
            log.write(f"{top}\t{_asked_by()}\n")
    except Exception:  # noqa: BLE001
        pass


if _LOG:
    sys.addaudithook(_audit)
