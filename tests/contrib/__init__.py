"""Tests of the framework integrations (conveyor.contrib)."""
