"""The shared DDP trainer. Importing the package does not import torch; its torch-free packages (config,
env, requeue, run, supervise) say so in their own __init__, and tests/test_entrypoints.py holds them to it."""

from trainer.imports import keep_own_modules

keep_own_modules()  # this copy's modules only: never an installed copy's (trainer.imports.OwnModules)
