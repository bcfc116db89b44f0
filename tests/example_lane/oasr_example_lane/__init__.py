"""oasr-example-lane: a third-party lane (``example_simt``) for oasr's ``gemm`` family."""
