"""The seed exercises done with Conveyor (tests/seeds/README.md): scripts and their tests."""
