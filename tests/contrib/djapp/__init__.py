"""A tiny Django app for tests/contrib/test_django.py (its tasks.py is autodiscovered)."""
