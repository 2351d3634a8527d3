"""What the inputs are and how their bytes arrive: the walk, tables, object stores, document extractors."""
