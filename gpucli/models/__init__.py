"""Where a model's files come from, what kind of model they hold, the devices, and the runtimes beside torch."""
