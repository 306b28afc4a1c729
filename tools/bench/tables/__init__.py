"""The generators of make_tables.py's blocks, one module per family of result files, and the
Markdown they are written into."""
