"""The launcher's environment: who this process is in the job (rank, world, nodes, master address and port),
read in one place from the variables of torchrun, Slurm, the local controller or none (launcher), Slurm's
hostlists (hostlist), and a master port every rank agrees on (rendezvous).

Torch-free, every module: the submitter and the script runner import it.
"""
