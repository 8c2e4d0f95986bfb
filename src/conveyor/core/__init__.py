"""Pure model of Conveyor: jobs, states, backoff, retry decisions, serialization, cron, ids.

Nothing in this package performs I/O, reads the wall clock or draws unseeded randomness;
the clock and the random source are always passed in.
"""
