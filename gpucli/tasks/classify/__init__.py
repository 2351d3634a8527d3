"""`gpucli classify`: images -> labels and scores."""

from __future__ import annotations

from gpucli.tasks.classify.task import ClassifyTask

__all__ = ["ClassifyTask"]
