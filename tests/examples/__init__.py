"""Tests of examples/ (each example runs) and of the code blocks of README.md."""
