"""Workload generators: which op, on which key, with which value size, in what order.

Everything is drawn from numpy generators seeded by (run seed, phase, worker), so the
same spec replays the same op sequence on every backend and in the tests.
"""
