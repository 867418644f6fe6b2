"""Runnable samples; each has an async main() that runs offline by default."""
