"""Small Conveyor apps that the process-level worker tests start in real worker processes."""
