"""The node runtime, in one package: who each process is in the job, attempts, restarts in the allocation,
hangs, the requeue signal and the requeue, and a `-- COMMAND`'s task. Torch-free, every module; the batch step's own (slurm, policy, watch, relay, signals) use the
standard library alone, as the batch step runs them with the node's own python3.

Who owns what (README.md beside this file has the table):
- launcher, hostlist, rendezvous: rank, world, nodes, master address and port, read in one place from the
  variables of torchrun, Slurm, the local controller or none; Slurm's hostlists; a master port every rank
  agrees on.
- attempt: every name of one start of the tasks. agent: the attempt loop both backends run.
- policy: the policy, pure: restart in the allocation, leave a node out (a spare takes its place), requeue
  without it, requeue after a failure, or end. The Slurm batch step and the local controller
  (jobs.local_controller) both ask it.
- slurm: the batch step of a Slurm job, in Python instead of generated bash: it runs srun, takes the requeue
  signal (the batch step's alone: --signal=B:...) and leaves the file every task's rank 0 watches for, asks
  the policy after each start, acts on it with scontrol, and records sacct.
- watch: rank 0's node-local heartbeat, and the hang no rank can name (every rank frozen at once).
- watchdog, in each training process: hangs, by section budgets and heartbeats in the job's store.
- signals, flag, relay: the requeue signal's one spelling, the flag its handler sets, its way from the batch
  shell to the tasks. The ranks' vote to stop on it is a collective: trainer.distributed.StopVote.
- attempts: attempts.json, each attempt's start and stop, and rank 0's requeue.
- script: what each task of a `-- COMMAND` job runs: your command, with torchrun's variables.
The few-line API a user's own script calls stays trainer.requeue.
"""
