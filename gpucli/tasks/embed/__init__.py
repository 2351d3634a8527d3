"""`gpucli embed`: texts, documents and images -> vectors."""

from __future__ import annotations

from gpucli.tasks.embed.task import EmbedTask

__all__ = ["EmbedTask"]
