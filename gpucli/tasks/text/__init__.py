"""What the text tasks share with search: tokenizers, tokens, windows, the unknown-token rule, BM25 terms."""
