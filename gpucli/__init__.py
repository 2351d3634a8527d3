"""gpucli: batch inference over file trees on GPUs (embed, classify, transcribe)."""

__version__ = "0.2.0"
