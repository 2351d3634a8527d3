"""Images for the image tasks: decoding and shared-memory batches."""
