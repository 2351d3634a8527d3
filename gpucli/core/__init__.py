"""The vocabulary every floor shares: errors, records, keys, decisions, config, summary, progress.

The lowest floor: it imports nothing else of gpucli."""
