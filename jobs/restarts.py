"""The batch script's lines around srun that restart a failed step: in the same allocation (`restarts_in_job`),
by a requeue (`requeue_on_failure`), and without a node that failed twice (on a spare node, `spare_nodes`, or
in a new allocation that excludes it). Pure functions of the profile; jobs.plan puts them in the script.

A failed step is held against a node only when its root cause may be the node's: a hang, a task killed by a
signal, or a hardware or driver error (trainer.run.failures.suspect_node). A Python traceback follows the
code to any node, so it never excludes one.
"""

import shlex
from pathlib import Path

from jobs.profiles import Profile
from trainer.env.launcher import IN_JOB_RESTART
from trainer.requeue.relay import ATTEMPT

STEP_ARGS = "${step_args-}"  # srun's options for this step (a subset of the nodes); the batch script sets them


def tracks_nodes(profile: Profile) -> bool:
    """Whether a failed step may start again, and so whether its node's failures are counted."""
    return bool(profile.restarts_in_job or profile.requeue_on_failure)


def setup_lines(profile: Profile, log_dir: Path, run_dirs: list[Path]) -> list[str]:
    """The last setup lines: which run this job (or array task) writes, and srun in a loop when it may
    restart in the allocation. With spare nodes the step asks for the nodes it uses, not the allocation's."""
    lines = []
    if tracks_nodes(profile):
        lines += [
            f"run_dirs=({' '.join(shlex.quote(str(d)) for d in run_dirs)})",
            'run_dir="${run_dirs[${SLURM_ARRAY_TASK_ID:-0}]}"',
            # One line per failed step held against a node, per job id: it survives requeues (same id).
            f'failed_nodes={shlex.quote(str(log_dir))}/failed_nodes_"$SLURM_JOB_ID"',
            'left_out=""',
            'exclude_node=""',
        ]
    nodes = f"--nodes={profile.nodes} --ntasks={profile.nodes * profile.tasks_per_node}" if profile.spare_nodes else ""
    if profile.restarts_in_job:
        lines += ["in_job=0", "while :; do", f'export {IN_JOB_RESTART}="$in_job"']
    if tracks_nodes(profile):
        lines += ["step_started=$(date +%s.%N)"]
    if nodes:
        lines += [f'step_args="{nodes}${{left_out:+ --exclude=$left_out}}"']
    return lines


def blame_lines(profile: Profile, python: str) -> list[str]:
    """After a failed step (not the requeue signal's, not a stop on purpose): count it against its node; a node
    counted twice is left out of the next step when a spare node can take its place, else marked for a
    requeue without it (exclude_lines)."""
    failures = f"{shlex.quote(python)} -m trainer.run.failures"
    spare = profile.spare_nodes
    twice = ['            exclude_node="$node"']
    if spare:
        twice = [
            f'            if [ "$(printf %s "$left_out" | tr , "\\n" | grep -c .)" -lt {spare} ]; then',
            '                left_out="${left_out:+$left_out,}$node"',
            '                echo "node $node failed twice: the next step leaves it out (--exclude=$left_out), a spare'
            ' node takes its place"',
            "            else",
            '                exclude_node="$node"',
            "            fi",
        ]
    return [
        f'if [ "$status" -ne 0 ] && [ ! -e "${ATTEMPT}.signal" ] && [ ! -e "${ATTEMPT}.stopped" ]; then',
        f'    node=$({failures} "$run_dir" "$step_started" 2>/dev/null) || node=""',
        '    if [ -n "$node" ]; then',
        '        echo "$node" >> "$failed_nodes"',
        '        times=$(grep -cx "$node" "$failed_nodes")',
        '        echo "the step failed on node $node (its failure $times in this job)"',
        '        if [ "$times" -ge 2 ]; then',
        *twice,
        "        fi",
        "    fi",
        "fi",
    ]


def restart_loop_end(limit: int) -> list[str]:
    """After srun: start it again, up to `limit` times, after a failed step (a crash, a hang, a killed task);
    not after the requeue signal (the run saved and stops, or the job is being requeued), nor after a stop on
    purpose (`.stopped`: a budget spent, bad input), nor when a node must go and no spare node is left."""
    return [
        f'if [ "$status" -ne 0 ] && [ "$in_job" -lt {limit} ] && [ ! -e "${ATTEMPT}.signal" ] '
        f'&& [ ! -e "${ATTEMPT}.stopped" ] && [ -z "$exclude_node" ]; then',
        "    in_job=$((in_job + 1))",
        f'    echo "srun failed with status $status: starting the tasks again in this allocation ($in_job of {limit})"',
        "    continue",
        "fi",
        "break",
        "done",
    ]


def exclude_lines(profile: Profile) -> list[str]:
    """A node that failed twice and no spare node to take its place: the job is requeued without it (every
    node that failed twice, and the profile's `exclude`). A running job's ExcNodeList cannot change, so the
    script holds the requeued job, sets it, and releases it; the requeue's SIGTERM is ignored meanwhile
    (Slurm's KillWait, 30 s by default, leaves the time). Not when the partition would have too few nodes
    left: the job would wait for ever."""
    needed = profile.nodes + profile.spare_nodes
    excluded = '$(sort "$failed_nodes" | uniq -d | paste -sd, -)'
    if profile.exclude:
        excluded = f"{profile.exclude},{excluded}"
    partition = 'scontrol show hostnames "$(sinfo -h -p "$SLURM_JOB_PARTITION" -o %N | paste -sd, -)" | sort -u'
    return [
        'if [ -n "$exclude_node" ]; then',
        f'    excluded="{excluded}"',
        f'    room=$(comm -23 <({partition}) <(scontrol show hostnames "$excluded" | sort -u) | wc -l)',
        f'    if [ "$room" -ge {needed} ]; then',
        '        echo "node $exclude_node failed twice and no spare node is left: requeueing the job without it'
        ' (ExcNodeList=$excluded)"',
        f'        touch "${ATTEMPT}.failed"  # the next attempt counts this one as a failure, not a requeue',
        "        trap '' TERM",
        '        scontrol requeuehold "$SLURM_JOB_ID"',
        '        for _ in $(seq 40); do scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$excluded" 2>/dev/null'
        " && break; sleep 0.5; done",
        '        scontrol release "$SLURM_JOB_ID"',
        '        exit "$status"',
        "    fi",
        '    echo "node $exclude_node failed twice, but partition $SLURM_JOB_PARTITION has too few other nodes: '
        'it stays in"',
        "fi",
    ]


def failure_requeue_lines(limit: int, log_dir: Path) -> list[str]:
    """Batch-script lines run after srun: requeue a failed job up to `limit` times.

    The trainer cannot do it: the rank that failed may be rank 0, or its node may be gone. A file per
    job id counts the failure requeues, apart from the requeues after a signal (those end with status 0).
    `status` holds srun's exit status (jobs.plan.teardown_lines).
    """
    return [
        f'count_file={shlex.quote(str(log_dir))}/failures_"$SLURM_JOB_ID"',
        f'if [ "$status" -ne 0 ] && [ "$(cat "$count_file" 2>/dev/null | wc -l)" -lt {limit} ]; then',
        '    echo "$(date +%s) $status" >> "$count_file"',
        f'    touch "${ATTEMPT}.failed"  # the next attempt counts this one as a failure, not a requeue',
        '    echo "srun failed with status $status: requeueing (failure $(wc -l < "$count_file") of '
        + str(limit)
        + ')"',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "fi",
    ]


def teardown_lines(profile: Profile, log_dir: Path, python: str) -> list[str]:
    """What runs after srun's wait, up to the accounting lines and the exit (jobs.plan.teardown_lines)."""
    lines = blame_lines(profile, python) if tracks_nodes(profile) else []
    if profile.restarts_in_job:
        lines += restart_loop_end(profile.restarts_in_job)
    if tracks_nodes(profile):
        lines += exclude_lines(profile)
    if profile.requeue_on_failure:
        lines += failure_requeue_lines(profile.requeue_on_failure, log_dir)
    return lines
