"""The data: images decoded to tensors (decode), the checks the tasks run at submit (checks), the data a run
points at, resolved and checked by its task (resolve), the resolved file lists every rank reads (filelist),
the built-in sample data (sample), and the training batches (loader).

checks, resolve, filelist and sample are torch-free (the submitter uses them); decode and loader import torch.
"""
