"""`make bench`: mpiop at scale on a simulated cluster (KWOK), against the apiserver's own limit.

Run `python -m bench --help` for the knobs; `python -m bench --quick` is a one-minute smoke run.
"""
