"""Whether the model can read a text's script: a text mostly written in scripts none of the model's
languages uses is refused, as the unknown-token rule (tasks/text/unknown.py) refuses a text
whose words the vocabulary does not hold. That rule catches Chinese ([UNK]); Cyrillic, Greek, Arabic,
Hebrew, Devanagari or Thai text turns into known sub-word pieces an English model never learnt to
read, and was embedded without a word (a Russian man page: 4,657 Cyrillic letters, 743 Latin, exit 0).

The model's languages come from its card or its declaration (gpucli/models/languages.py); a model
that names none reads anything here. "Mostly": over MAX_OTHER_SHARE of the text's letters. Measured
on Debian's translated man pages (benchmarks/scripts.py, docs/languages.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucli.inputs.scripts import letters, shown
from gpucli.models.languages import model_languages, scripts_of
from gpucli.tasks.text.unknown import MULTILINGUAL

MAX_OTHER_SHARE = 0.5  # refused above it: a text mostly in scripts the model does not read


@dataclass(frozen=True)
class ScriptRule:
    """The rule for one model: the scripts its languages are written in (None: any)."""

    model: str
    languages: tuple[str, ...]
    scripts: frozenset[str] | None

    @staticmethod
    def of(model: str, path: str | None) -> ScriptRule:
        languages = model_languages(model, path)
        return ScriptRule(model, languages, scripts_of(languages))

    def refusal(self, text: str) -> str | None:
        """The failure record's reason when `text` is mostly in scripts the model does not read, else None."""
        if self.scripts is None or text.isascii():
            return None
        found = letters(text)
        other = 1.0 - found.share(self.scripts)
        if not found.total or other <= MAX_OTHER_SHARE:
            return None
        script = shown(found.main(outside=self.scripts))
        reads = ", ".join(self.languages)
        return (f"{other:.0%} of this text's letters are in scripts {self.model} does not read (mostly {script}; it "
                f"reads {reads}), and its vectors would mean little. Use a model that does, e.g. --model "
                f"{MULTILINGUAL} (from the Hugging Face Hub), or --allow-other-scripts to embed it anyway")
