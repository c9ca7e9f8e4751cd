"""The process group and what the ranks do together: join, wrap the model in DDP, average, share RNG state, and
agree to stop at a step boundary (the requeue signal's vote; what the stop means is trainer.supervise's)."""

import contextlib
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.config import DistConfig
from trainer.config.tasks import check_devices
from trainer.errors import UserError
from trainer.run.rundir import RunDir
from trainer.supervise.attempts import Attempts, record_stop, requeue
from trainer.supervise.flag import StopFlag
from trainer.supervise.launcher import DistEnv
from trainer.supervise.signals import JobSettings

# torch's names for its flight recorder, and the deprecated ones a user may still set (either form counts).
FR_NAMES = {
    "TORCH_FR_BUFFER_SIZE": "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
}


def nccl_diagnostics(environ: Mapping[str, str], run_dir: Path) -> dict[str, str]:
    """torch's own NCCL hang diagnostics, where the user has not set them: the flight recorder (the last 2,000
    collectives of each rank) dumped on a collective timeout into the run's nccl_trace/ folder, and errors that
    end the process instead of leaving it hung (torch's default since 2.2, set here for older ones too)."""
    wanted = {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(RunDir(run_dir).nccl_trace / "rank_"),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }
    return {k: v for k, v in wanted.items() if k not in environ and FR_NAMES.get(k, k) not in environ}


def flight_recorder_dump() -> bytes | None:
    """This rank's flight recorder as torch's fr_trace reads it, through torch's private call (there is no public
    one in torch 2.14): `_dump_fr_trace`, or its older name. None, after a one-line warning, where neither is."""
    import torch._C._distributed_c10d as c10d

    dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        print("warning: this torch has no flight recorder dump (_dump_fr_trace); no nccl_trace/ written", flush=True)
        return None
    return bytes(dump(True, True, False))  # collectives, their stack traces, not only the active ones


def dump_flight_recorder(run_dir: Path, rank: int) -> str | None:
    """NCCL's flight recorder (this rank's last collectives: which one each rank is in, and since when) into
    nccl_trace/rank_N, in the form TORCH_NCCL_DUMP_ON_TIMEOUT writes and torch's fr_trace reads. The watchdog
    calls it when it finds a hang, before the rank exits: NCCL's own dump would come only at the collective
    timeout, which the exit forestalls. None for gloo (no recorder) or outside a process group."""
    if not (dist.is_initialized() and dist.get_backend() == "nccl"):
        return None
    if (data := flight_recorder_dump()) is None:
        return None
    path = RunDir(run_dir).nccl_trace / f"rank_{rank}"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return str(path)


def rendezvous_file(env: DistEnv, run_dir: Path) -> Path:
    """dist.init_method=file: the file the ranks of this attempt meet in, in the run directory every node sees;
    a new one for each attempt (job, requeue, in-job restart), so no rank reads a store an earlier one left."""
    return RunDir(run_dir).rendezvous / f"store_{env.attempt_key}"


@contextlib.contextmanager
def process_group(
    env: DistEnv,
    timeout_s: int,
    device: torch.device,
    run_dir: Path | None = None,
    init: str = "tcp",
    one_too: bool = False,
) -> Iterator[None]:
    """Join the process group for the duration of the block, and always leave it. Its timeout is every
    collective's: a peer that never answers fails the job after timeout_s (the watchdog usually first).
    `init`: tcp (rank 0's MASTER_ADDR:MASTER_PORT) or file (rendezvous_file: no port to agree on). One process
    forms no group (training needs none), unless `one_too` (jobs.check: NCCL proven on a one-GPU job too)."""
    if not env.distributed and not one_too:
        yield
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and run_dir is not None:
        RunDir(run_dir).nccl_trace.mkdir(exist_ok=True)
        os.environ.update(nccl_diagnostics(os.environ, run_dir))
    store = rendezvous_file(env, run_dir) if init == "file" and run_dir is not None else None
    if store is not None:
        store.parent.mkdir(exist_ok=True)
    dist.init_process_group(
        backend,
        init_method=f"file://{store}" if store is not None else f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    print(f"process group formed: backend {backend}, {env.world_size} ranks, device {device}", flush=True)
    try:
        yield
    finally:
        dist.destroy_process_group()
        if store is not None and env.is_main:
            store.unlink(missing_ok=True)  # torch's FileStore removes it when the last rank leaves; else here


def beat_store(env: DistEnv, init: str) -> dist.TCPStore | None:
    """A client of the job's TCPStore (rank 0's, at MASTER_ADDR:MASTER_PORT) for heartbeats, apart from the
    process group's: a short timeout, so that a rank 0 that does not answer is named in seconds, not after the
    group's timeout. None without one (one process, dist.init_method=file)."""
    if not env.distributed or init != "tcp":
        return None
    try:
        store = dist.TCPStore(env.master_addr, env.master_port, is_master=False, timeout=timedelta(seconds=60))
        store.set_timeout(timedelta(seconds=5))  # each operation's; connecting to a busy rank 0 may take longer
        return store
    except (RuntimeError, OSError) as exc:  # heartbeats then stay in files: a warning, never a failed run
        print(f"warning: no heartbeat client of the job's store ({exc}); heartbeats stay in files", flush=True)
        return None


def pick_devices(env: DistEnv) -> list[torch.device]:
    """The devices this process drives: one per task, or gpus_per_task of them. On CUDA, the task's own K
    GPUs when Slurm showed it only those (--gpus-per-task), else its share of the node's by local rank; on
    CPU, K times the CPU (the same code path, for shape and exactness)."""
    k = max(1, env.gpus_per_task)
    if not torch.cuda.is_available():
        return [torch.device("cpu")] * k
    devices = [torch.device("cuda", i) for i in device_indices(env.local_rank, k, torch.cuda.device_count())]
    torch.cuda.set_device(devices[0])
    return devices


def device_indices(local_rank: int, k: int, count: int) -> list[int]:
    """The CUDA indices a task drives among the `count` it sees: all of them when it sees just its own k
    (--gpus-per-task), else its share by local rank. Two ranks on one GPU would run, slowly or out of memory,
    so a share beyond the GPUs is refused, never wrapped around."""
    first = 0 if count == k else local_rank * k
    if first + k > count:
        share = f"GPU {first}" if k == 1 else f"GPUs {first}-{first + k - 1}"
        raise UserError(
            f"local rank {local_rank} would drive {share}, but this node shows {count} GPU(s); ask for at most "
            f"{count} GPUs per node (gpus_per_node), or check CUDA_VISIBLE_DEVICES"
        )
    return list(range(first, first + k))


def make_model(task: Any, config: Any, dataset: Any, devices: list[torch.device]) -> torch.nn.Module:
    """The task's model on its device; over several (gpus_per_task) the task places its parts itself: its
    model() takes `devices=` (torch's DDP tutorial's ToyMpModel(dev0, dev1)), and inputs go to the first."""
    check_devices(task, len(devices))
    if "devices" in inspect.signature(task.model).parameters:
        model: torch.nn.Module = task.model(config, dataset, devices=devices)
        return model if len(devices) > 1 else model.to(devices[0])
    return task.model(config, dataset).to(devices[0])


def mean_over_ranks(value: torch.Tensor, env: DistEnv) -> float:
    value = value.detach().clone().float()
    if env.distributed:
        dist.all_reduce(value)
        value /= env.world_size
    return value.item()


def gather_rng(env: DistEnv, device: torch.device) -> list[torch.Tensor]:
    """Every rank's generator state, so a resumed run continues each stream exactly."""
    state = torch.get_rng_state()
    if device.type == "cuda":
        state = torch.cat([state, torch.cuda.get_rng_state(device)])
    return gather_objects(env, state)


def gather_objects(env: DistEnv, value: Any) -> list[Any]:
    """Every rank's `value`, by rank (a collective; one process: its own alone)."""
    if not env.distributed:
        return [value]
    values: list[Any] = [None] * env.world_size
    dist.all_gather_object(values, value)
    return values


def restore_rng(states: list[torch.Tensor], env: DistEnv, device: torch.device) -> None:
    """This rank's streams as saved, one per process; on another number of processes, rank r takes stream
    r % saved (each micro-batch is seeded by its place in the step since checkpoints say "streams": these
    matter only to a run saved before)."""
    state = states[env.rank % len(states)].cpu()
    cpu_size = torch.get_rng_state().numel()
    torch.set_rng_state(state[:cpu_size])
    if device.type == "cuda" and state.numel() > cpu_size:
        torch.cuda.set_rng_state(state[cpu_size:], device)


def covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: overlapping all-reduces count once."""
    total, reach = 0.0, float("-inf")
    for begin, end in sorted(intervals):
        if end > reach:
            total += end - max(begin, reach)
            reach = end
    return total


class CommTimer:
    """The seconds during which at least one of DDP's gradient all-reduces was in flight, from a bucket's launch
    to its completion, the wait for the slowest rank included; overlapping buckets count once.

    gloo: measured on the host (its future completes when the all-reduce has). NCCL: its future completes as
    soon as the work is queued, so the host would see only the launch; a CUDA event is recorded on the stream
    at the launch and another in the completion callback, whose stream waits for the all-reduce, and the
    device's interval is read once both have happened (`take()` never waits: an interval not done yet counts
    at a later step)."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.cuda = device is not None and device.type == "cuda"
        self.seconds, self._in_flight, self._since = 0.0, 0, 0.0
        self._lock = threading.Lock()  # completions run on the backend's thread
        self._events: list[tuple[Any, Any]] = []  # (start, end) CUDA events not yet read

    def launched(self) -> Any:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return start
        with self._lock:
            if not self._in_flight:
                self._since = time.perf_counter()
            self._in_flight += 1
        return None

    def completed(self, start: Any) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()  # on the callback's stream, which waits for the all-reduce
            with self._lock:
                self._events.append((start, end))
            return
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self.seconds += time.perf_counter() - self._since

    def take(self) -> float:
        with self._lock:
            if self.cuda:
                done = 0
                while done < len(self._events) and self._events[done][1].query():
                    done += 1
                ready, self._events = self._events[:done], self._events[done:]
                if ready:
                    origin = ready[0][0]
                    ms = [
                        (origin.elapsed_time(a) if a is not origin else 0.0, origin.elapsed_time(b)) for a, b in ready
                    ]
                    self.seconds += covered(ms) / 1000.0
            seconds, self.seconds = self.seconds, 0.0
        return seconds


def _timed_allreduce(timer: CommTimer, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's own all-reduce, timed. A multiply by 1 / world size, as DDP's built-in path scales the gradients
    (default_hooks.allreduce_hook divides, which differs in the last bit for 3 or 6 ranks), then the sum."""
    tensor = bucket.buffer().mul_(1.0 / dist.get_world_size())
    start = timer.launched()

    def done(future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        timer.completed(start)
        return future.value()[0]

    return dist.all_reduce(tensor, async_op=True).get_future().then(done)  # type: ignore[union-attr]


def gather_hosts(env: DistEnv) -> list[str]:
    """Every rank's host, by rank (a collective)."""
    return [str(h) for h in gather_objects(env, env.node_name)]


def wrap(
    model: torch.nn.Module, env: DistEnv, device: torch.device, settings: DistConfig, timer: CommTimer | None = None
) -> torch.nn.Module:
    """DDP with the gradient bucket settings of `settings`; one process gets the bare model.

    bucket_cap_mb sets how many gradient bytes go into one all-reduce (fewer, larger messages against
    earlier overlap with backward); gradient_as_bucket_view makes .grad a view into the buckets (one copy
    less per step); static_graph lets DDP skip re-discovering which parameters get gradients.
    """
    if not env.distributed:
        return model  # DDP needs a process group and adds nothing with one process
    ddp = DDP(
        model,
        # A model over several devices (gpus_per_task) is wrapped without device_ids, as torch's tutorial does.
        device_ids=[device.index] if device.type == "cuda" and env.gpus_per_task == 1 else None,
        bucket_cap_mb=settings.bucket_cap_mb,
        gradient_as_bucket_view=settings.gradient_as_bucket_view,
        static_graph=settings.static_graph,
    )
    if timer is not None:  # the communication part of each rank's step (trainer.stragglers)
        ddp.register_comm_hook(timer, _timed_allreduce)
    if not settings.static_graph:  # a static graph delays its first all-reduce: DDP's own path, not this one
        settle_buckets(ddp)
    return ddp


def settle_buckets(ddp: DDP) -> None:
    """Make DDP lay out its gradient buckets now, before the first step, the same way in every attempt.

    DDP reduces its first backward in one bucket in parameter order, then rebuilds its buckets in the order that
    backward produced the gradients. Over more than two ranks a gradient's sum depends on where it sits in its
    bucket (a ring all-reduce adds the ranks in an order that depends on the chunk), so an attempt resumed at step
    N, whose step N + 1 was its first, summed it differently from an uninterrupted run, long rebuilt by then.
    One backward of zeros into every parameter (each rank's all-reduce of its zeros, no optimizer step) makes DDP
    rebuild its buckets at the first forward from that backward's order, fixed by the model alone; the zero
    gradients are dropped."""
    params = [p for p in ddp.module.parameters() if p.requires_grad]
    sparse = any(getattr(m, "sparse", False) for m in ddp.module.modules())  # nn.Embedding(sparse=True)
    if not params or sparse or any(p.is_complex() for p in params):
        return  # a dense zero gradient where DDP expects a sparse one, a complex sum: DDP's own first step then
    ddp.reducer.prepare_for_backward([])  # what DDP's forward does before a backward that must be reduced
    # The autograd engine runs the newest branch first: the gradients arrive last parameter first, the order DDP
    # itself assumes before its first backward (the output layers' gradients are ready first), so the first
    # bucket's all-reduce starts while backward still runs.
    torch.autograd.backward([p.reshape(-1)[:1].sum() * 0 for p in params])
    for p in params:
        p.grad = None


class StopVote:
    """What the ranks agree to do at a step: "stop" (the requeue signal), "save" (jobs.top asked rank 0 for a
    checkpoint now) or "" (train on).

    Every `every` steps each rank's vote goes out in an all-reduce(MAX), started at that step and read at the
    next, once that step's work is queued: no step waits for it. (Read at once, its `.item()` drained a GPU's
    queue every `every` steps, and on gloo it was a round trip on the step's path; voting at every step that way
    cost about 2% of a 110 ms CPU step, benchmarks/trainer_overhead.py.) Every rank starts and reads the same
    votes at the same steps, so all stop (or save) at the same step, at most `every` steps after the signal,
    well inside its delay. One process decides alone, at once.
    """

    def __init__(self, env: DistEnv, device: torch.device, every: int) -> None:
        self.env, self.device, self.every = env, device, every
        self._pending: tuple[Any, torch.Tensor, Any] | None = None  # (gloo's work, the vote, a CUDA event)

    def at(self, step: int, flag: StopFlag, save_asked: Callable[[], bool]) -> str:
        """The answer due at `step` (the vote started at the step before), and a new vote every `every` steps;
        `save_asked` is called only then (it takes the request)."""
        answer = self.drain()
        if step % self.every == 0:
            mine = 2 if flag.raised else int(save_asked())
            if not self.env.distributed:
                return ANSWERS.get(mine, "")
            self._start(mine)
        return answer

    def _start(self, mine: int) -> None:
        vote = torch.full((1,), mine, dtype=torch.int64, device=self.device)  # a fill: torch.tensor(list) syncs
        work = dist.all_reduce(vote, op=dist.ReduceOp.MAX, async_op=True)
        if self.device.type != "cuda":
            self._pending = (work, vote, None)
            return
        assert work is not None
        work.wait()  # NCCL: the current stream waits for it, the host does not
        host = torch.empty(1, dtype=vote.dtype, pin_memory=True)
        host.copy_(vote, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        self._pending = (None, host, done)

    def drain(self) -> str:
        """The answer of the vote under way ("" with none), waiting for it if it is not in yet."""
        if self._pending is None:
            return ""
        work, vote, done = self._pending
        self._pending = None
        if done is not None:
            done.synchronize()  # the step it was started at is done on the device by now, or nearly
        else:
            work.wait()
        return ANSWERS.get(int(vote.item()), "")


ANSWERS = {2: "stop", 1: "save"}


def decide(
    env: DistEnv,
    attempts: Attempts | None,
    settings: JobSettings,
    step: int,
    run_dir: Path,
    device: torch.device,
    signalled_at: float | None = None,
) -> bool:
    """Rank 0 records why the run stopped and whether to requeue; every rank learns the decision, and then rank
    0 requeues the job (Slurm's requeue ends every task: one still in the broadcast would fail on its peer)."""
    go_on = True
    if attempts is not None:
        go_on = record_stop(env, attempts, settings, step, run_dir, signalled_at, requeue_now=False)
    if env.distributed:
        decision = torch.tensor([int(go_on)], device=device)
        dist.broadcast(decision, src=0)
        go_on = bool(decision.item())
    if attempts is not None and go_on:
        requeue(env)
    return go_on
