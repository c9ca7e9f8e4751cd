"""The shared DDP trainer. Importing the package does not import torch; its torch-free packages (config,
env, requeue, run) say so in their own __init__, and tests/test_entrypoints.py holds them to it."""
