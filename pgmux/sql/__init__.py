"""SQL text read without a server: the scanner, and what a statement's text tells."""
