"""mpicluster bench: whether the cluster is fast, and which node or link is not.

schedule.py: which node pairs are measured, in rounds of disjoint pairs; verdict.py:
suspects from the first pass, the second pass that tells a slow node from a slow link,
and the findings. The core never prints.
"""
