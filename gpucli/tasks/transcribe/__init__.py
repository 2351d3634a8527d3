"""`gpucli transcribe`: audio -> text."""

from __future__ import annotations

from gpucli.tasks.transcribe.task import TranscribeTask

__all__ = ["TranscribeTask"]
