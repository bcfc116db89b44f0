"""Subcommands of ``oasr tune`` that live in their own modules (loaded when invoked)."""
