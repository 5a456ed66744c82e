"""Elastic rank runtime: rendezvous, state, checkpoints; torch.distributed and Horovod backends."""
