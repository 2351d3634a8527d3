"""Documents -> text: extraction and OCR in limited child processes."""
