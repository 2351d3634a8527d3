"""Zero-shot labels (`gpucli classify --labels`): the label list a user gives, checked, and the
prompts the text tower reads. Pure: no torch, no transformers, no file but the labels file.

The list comes from `--labels` ("cat,dog,a receipt", or a JSON array for labels that hold a
comma) or from `--labels-file` (UTF-8, one label per line, blank lines skipped). Each label is
stripped; an empty list, a duplicate, or both options at once are usage errors. A label's
prompt is `--label-template` with the label in its `{}` (str.format, as transformers'
zero-shot-image-classification pipeline formats its `hypothesis_template`).

The parent reads the file once and hands the workers the list itself as a JSON array in
`--labels` (`carried`): a Ray actor on another host has no such file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpucli.core.errors import UsageError

DEFAULT_TEMPLATE = "a photo of a {}."  # CLIP's own prompt (its paper, its ImageNet zero-shot notebook)
_PROBE = "\x00label\x00"  # stands for a label when a template is checked


@dataclass(frozen=True)
class ZeroShotLabels:
    """The labels in the user's order (a row's class id is a label's place here) and the template."""

    labels: tuple[str, ...]
    template: str = DEFAULT_TEMPLATE

    def __post_init__(self) -> None:
        check_template(self.template)
        if not self.labels:
            raise UsageError("--labels: the label list is empty; give at least one label (--labels \"cat,dog\" or "
                             "--labels-file FILE, one label per line)")
        seen: set[str] = set()
        twice = [label for label in self.labels if label in seen or seen.add(label)]
        if twice:
            raise UsageError(f"--labels: {', '.join(repr(t) for t in dict.fromkeys(twice))} given more than once; "
                             "each label must be given once (its class id is its place in the list)")

    @staticmethod
    def of(labels: str | None, labels_file: str | None, template: str = DEFAULT_TEMPLATE) -> ZeroShotLabels | None:
        """The labels the options give, or None when neither --labels nor --labels-file is given
        (classify then runs the model's own classes)."""
        if not check_given(labels, labels_file, template):
            return None
        return ZeroShotLabels(parse_labels(labels) if labels is not None else read_labels_file(labels_file or ""),
                              template)

    def prompts(self) -> list[str]:
        """The text each label is scored by: the template with the label in it."""
        return [self.template.format(label) for label in self.labels]

    def carried(self) -> str:
        """The list as --labels takes it back unchanged (a JSON array), for the workers."""
        return json.dumps(list(self.labels), ensure_ascii=False)


def check_given(labels: str | None, labels_file: str | None, template: str = DEFAULT_TEMPLATE) -> bool:
    """Whether zero-shot labels are given, after the checks that read no file (the options'
    own, when the config is built): one source of labels, a template that takes one, a list
    that is neither empty nor holds a label twice."""
    if labels is None and labels_file is None:
        if template != DEFAULT_TEMPLATE:
            raise UsageError("--label-template applies to zero-shot labels: give --labels or --labels-file too")
        return False
    if labels is not None and labels_file is not None:
        raise UsageError("--labels and --labels-file: give one of them, not both")
    check_template(template)
    if labels is not None:
        ZeroShotLabels(parse_labels(labels), template)
    return True


def parse_labels(text: str) -> tuple[str, ...]:
    """--labels: a JSON array of strings when it starts with "[" and parses as one, else a
    comma-separated list. Each label stripped; empty ones ("cat,,dog", a trailing comma) dropped."""
    if text.lstrip().startswith("["):
        try:
            values = json.loads(text)
        except ValueError:
            values = None
        if isinstance(values, list):
            if not all(isinstance(v, str) for v in values):
                raise UsageError(f"--labels: a JSON array of labels must hold strings only, got {text!r}")
            return _kept(values)
    return _kept(text.split(","))


def read_labels_file(path: str) -> tuple[str, ...]:
    """--labels-file: one label per line, UTF-8 (a byte-order mark is dropped), blank lines skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"--labels-file {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--labels-file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"--labels-file {path}: cannot be read ({exc.strerror or exc})") from None
    labels = _kept(text.splitlines())
    if not labels:
        raise UsageError(f"--labels-file {path}: holds no label (one label per line)")
    return labels


def check_template(template: str) -> None:
    """A template must put the label somewhere: one `{}` (or `{0}`), other braces doubled."""
    try:
        filled = template.format(_PROBE)
    except (IndexError, KeyError, ValueError):
        filled = ""
    if _PROBE not in filled:
        raise UsageError(f"--label-template {template!r}: it must hold {{}} where the label goes (e.g. "
                         f"{DEFAULT_TEMPLATE!r}); write literal braces as {{{{ and }}}}")


def _kept(values: list[str]) -> tuple[str, ...]:
    return tuple(v.strip() for v in values if v.strip())
