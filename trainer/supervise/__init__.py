"""The one supervisor of a job's tasks: what follows a start of them that ended. Torch-free, every module: the
standard library alone, as the batch step runs it with the node's own python3.

Who owns what:
- trainer.supervise.policy: the policy, pure: restart in the allocation, leave a node out (a spare takes its
  place), requeue without it, requeue after a failure, or end. The Slurm batch step and the local controller
  (jobs.local_controller) both ask it.
- trainer.supervise.slurm: the batch step of a Slurm job, in Python instead of generated bash: it runs srun,
  takes the requeue signal (the batch step's alone: --signal=B:...) and leaves the file every task's rank 0
  watches for, asks the policy after each start, acts on it with scontrol, and records sacct.
- trainer.watchdog, in each training process: hangs, by section budgets and heartbeats in the job's store.
- trainer.requeue and trainer.preemption: the requeue signal inside the tasks, the ranks' agreement to stop.
"""
