"""The shared DDP trainer. Importing the package does not import torch."""
