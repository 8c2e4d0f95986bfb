"""Tests for the runnable recipes in examples/ (one per seed exercise)."""
