"""The data: images decoded to tensors (decode), the checks run at submit (checks), the resolved file lists
every rank reads (filelist), the built-in sample data (sample), and the training batches (loader).

checks, filelist and sample are torch-free (the submitter uses them); decode and loader import torch.
"""
