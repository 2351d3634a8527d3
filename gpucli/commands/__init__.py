"""Commands beside the tasks that read an output: search and inspect."""
