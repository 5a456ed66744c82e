"""Allocation of idle nodes to training jobs (MILP with pulp; greedy fallback) and block sizing."""
