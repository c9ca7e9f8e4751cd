"""Batches built by worker processes straight into shared-memory buffers that are reused, not made anew.

torch's DataLoader moves each batch out of a worker in a fresh shared-memory segment: the kernel allocates and
zeroes its pages, then frees them when the training loop drops the batch. At 256 px that transport, not
decoding, held the loader to about two thirds of the rate at which the same processes decode
(benchmarks/RESULTS.md §2). Here a fixed set of buffers (anonymous shared mappings, made before the workers
fork) is written by the workers, which send back only the buffer's number and the batch's.

A buffer is written again only once the batch handed out from it is garbage, every view of it included: each
batch's tensors share one per-batch numpy array, and a weak reference to that array frees the buffer. A batch
the training loop keeps is therefore never overwritten; a loop that keeps them all runs out of buffers and is
told so.

Samples must be tensors, numbers, or tuples, lists and dicts of them, of one structure and shape throughout
(what default_collate would stack): `data.loader=torch` takes torch's DataLoader for anything else.
"""

import atexit
import gc
import mmap
import multiprocessing
import os
import signal
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy
import torch
from torch.utils.data import Dataset

from trainer.errors import UserError
from trainer.rng import isolated, seed_all

ALIGN = 64  # each field starts on a cache line
FIX = "; make the task's samples one shape or set data.loader=torch"


class Unsupported(TypeError):
    """A sample holds something other than tensors and numbers (a str, an image): not stackable into a buffer."""


@dataclass(frozen=True)
class Field:
    """One tensor of a sample (a number is a 0-d tensor), and where its rows sit in a buffer."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # of row 0, in bytes
    row: int  # bytes per sample

    def view(self, buffer: Any, rows: int) -> torch.Tensor:
        if not self.row:  # an empty tensor: nothing to share (frombuffer refuses a count of 0)
            return torch.empty((rows, *self.shape), dtype=self.dtype)
        count = rows * self.row // self.dtype.itemsize
        return torch.frombuffer(buffer, dtype=self.dtype, count=count, offset=self.offset).view(rows, *self.shape)


class Layout:
    """A sample's structure (tensors and numbers in tuples, lists and dicts) and its fields in a buffer."""

    def __init__(self, sample: Any, batch_size: int) -> None:
        self.structure, self.rows = _structure(sample), batch_size
        self.fields: list[Field] = []
        offset = 0
        for leaf in _leaves(sample):
            tensor = _tensor(leaf)
            row = tensor.numel() * tensor.element_size()
            self.fields.append(Field(tensor.dtype, tuple(tensor.shape), offset, row))
            offset += -(-row * batch_size // ALIGN) * ALIGN
        self.size = max(offset, 1)

    def write(self, views: list[torch.Tensor], row: int, sample: Any, index: int) -> None:
        if self.structure is None and isinstance(sample, torch.Tensor):  # the common case, without the walk
            if sample.shape == views[0].shape[1:] and sample.dtype == views[0].dtype:
                views[0][row].copy_(sample)
                return
        if _structure(sample) != self.structure:
            raise UserError(
                f"sample {index} is built as {_structure(sample)}, the first sample as {self.structure}{FIX}"
            )
        for field, view, leaf in zip(self.fields, views, _leaves(sample), strict=True):
            tensor = _tensor(leaf)
            if tuple(tensor.shape) != field.shape or tensor.dtype != field.dtype:
                raise UserError(
                    f"sample {index} holds a {tensor.dtype} tensor of shape {tuple(tensor.shape)} where the first "
                    f"sample held {field.dtype} {field.shape}{FIX}"
                )
            view[row].copy_(tensor)

    def batch(self, tensors: list[torch.Tensor]) -> Any:
        return _rebuild(self.structure, iter(tensors))


def _tensor(leaf: Any) -> torch.Tensor:
    # As default_collate: a Python float becomes float64, an int int64.
    return torch.tensor(leaf, dtype=torch.float64) if isinstance(leaf, float) else torch.as_tensor(leaf)


def _structure(sample: Any) -> Any:
    if isinstance(sample, tuple | list):
        return (type(sample), tuple(_structure(s) for s in sample))
    if isinstance(sample, dict):
        return (dict, tuple((k, _structure(v)) for k, v in sample.items()))
    if isinstance(sample, torch.Tensor | int | float | numpy.number | numpy.bool_):
        return None
    if isinstance(sample, numpy.ndarray) and sample.dtype.kind in "biufc":
        return None
    raise Unsupported(f"a sample holds a {type(sample).__name__}")


def _leaves(sample: Any) -> Iterator[Any]:
    if isinstance(sample, tuple | list):
        for s in sample:
            yield from _leaves(s)
    elif isinstance(sample, dict):
        for v in sample.values():
            yield from _leaves(v)
    else:
        yield sample


def _rebuild(structure: Any, tensors: Iterator[torch.Tensor]) -> Any:
    """The batch as default_collate builds it: a dict of batches, a namedtuple of batches, else a list."""
    if structure is None:
        return next(tensors)
    kind, parts = structure
    if kind is dict:
        return {k: _rebuild(s, tensors) for k, s in parts}
    if hasattr(kind, "_fields"):  # a namedtuple
        return kind(*(_rebuild(s, tensors) for s in parts))
    return [_rebuild(s, tensors) for s in parts]


def _defined_with_getitem(dataset: Any, name: str) -> bool:
    """Is `name` defined by the class that defines __getitem__? A subclass overriding __getitem__ alone must
    not be loaded through its parent's in-place writer."""

    def owner(attribute: str) -> type | None:
        return next((c for c in type(dataset).__mro__ if attribute in vars(c)), None)

    return owner(name) is not None and owner(name) is owner("__getitem__")


def _work(
    dataset: Dataset[Any], layout: Layout, buffers: list[mmap.mmap], conn: Connection, parents: list[Connection]
) -> None:
    """A worker: fill the buffer named in each task with the samples named, until told None (or orphaned)."""
    for end in parents:  # the training process's ends, inherited by the fork: the pipe's EOF must mean it is gone
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle, once
    parent = os.getppid()
    torch.set_num_threads(1)  # as DataLoader's workers: the cores are shared out as workers, not threads
    views = [[field.view(buffer, layout.rows) for field in layout.fields] for buffer in buffers]
    # A dataset of one tensor a sample may write it in place (`fill(out, index)`), sparing a copy of each sample.
    fill = (
        getattr(dataset, "fill", None) if layout.structure is None and _defined_with_getitem(dataset, "fill") else None
    )
    try:
        while True:
            while not conn.poll(5.0):
                if os.getppid() != parent:  # orphaned (the training process was killed): nobody will ask
                    return
            if (task := conn.recv()) is None:
                return
            epoch, number, slot, items = task
            try:
                # A sample's random augmentations follow from its seed, not from which worker made it.
                for row, (index, seed) in enumerate(items):
                    seed_all(seed)
                    if fill is not None:
                        fill(views[slot][0][row], index)
                    else:
                        layout.write(views[slot], row, dataset[index], index)
                conn.send((epoch, number, slot, len(items), None))
            except Exception as exc:  # noqa: BLE001 - handed to the training process, which raises it
                conn.send((epoch, number, slot, 0, _portable(exc)))
    except (EOFError, BrokenPipeError):  # the training process is gone
        pass


def _portable(exc: Exception) -> Exception:
    """The exception with the worker's traceback as a note, or a RuntimeError saying it when it cannot be pickled."""
    import pickle

    note = "in a data loader worker:\n" + "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure to pickle
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.add_note(note)
    return exc


class SharedLoader:
    """Iterates over batches of `dataset` in the order `sampler` gives, like DataLoader(..., persistent_workers)."""

    def __init__(
        self,
        dataset: Dataset[Any],
        sampler: Iterable[int],
        batch_size: int,
        workers: int,
        drop_last: bool,
        pin: bool = False,
        prefetch: int = 2,
    ) -> None:
        assert workers > 0, "no workers: use DataLoader, which loads in the training process"
        self.dataset, self.sampler, self.batch_size, self.drop_last = dataset, sampler, batch_size, drop_last
        self.workers, self.depth, self.pin = workers, workers * prefetch, pin
        with isolated():  # the probe's augmentations are not the task's to pay for
            self.layout = Layout(dataset[0], batch_size)
        # Two more buffers than batches in flight: the batch in the training loop's hands, and one it keeps.
        self.buffers = [mmap.mmap(-1, self.layout.size) for _ in range(self.depth + 2)]
        self.free = list(range(len(self.buffers)))
        self.conns: list[Connection] = []
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.owners: dict[int, weakref.ref[numpy.ndarray]] = {}  # a batch's buffer comes back when it dies
        self.in_flight = [0] * workers
        self.pending: set[int] = set()  # buffers a worker is filling
        self.epoch = 0
        self.stop: Callable[[], Any] = lambda: None

    def __len__(self) -> int:
        samples = len(self.sampler)  # type: ignore[arg-type]
        return samples // self.batch_size if self.drop_last else -(-samples // self.batch_size)

    def _start(self) -> None:
        context = multiprocessing.get_context("fork")  # the buffers are inherited, not sent
        for _ in range(self.workers):
            mine, theirs = context.Pipe()
            args = (self.dataset, self.layout, self.buffers, theirs, [*self.conns, mine])
            process = context.Process(target=_work, args=args, daemon=True)
            process.start()
            theirs.close()
            self.conns.append(mine)
            self.processes.append(process)
        # At the latest at exit, before multiprocessing terminates and joins its children: a worker keeps the
        # training process's handler for the requeue signal (it must outlive that signal), and submitit's
        # ignores SIGTERM, so it is told to stop. Registered after multiprocessing's exit hook: runs before it.
        self.stop = weakref.finalize(self, _stop, self.conns, self.processes)
        self.stop.atexit = False
        atexit.register(self.stop)

    def __iter__(self) -> Iterator[Any]:
        if not self.processes:
            self._start()
        self.epoch += 1
        for worker, count in enumerate(self.in_flight):  # answers for an epoch left early: buffers come back
            for _ in range(count):
                self._receive(worker)
        # (index, seed) pairs, as trainer.data's sampler gives them; bare indices get seeds from a base drawn
        # as DataLoader draws its own.
        items = list(self.sampler)
        if items and not isinstance(items[0], tuple):
            base = int(torch.empty((), dtype=torch.int64).random_().item())
            items = [(index, base + n) for n, index in enumerate(items)]
        batches = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        sent = 0
        for handed in range(len(batches)):
            while sent < len(batches) and sent - handed < self.depth:
                if not self.free:
                    if sent > handed:
                        break  # one comes back with the batch we wait for
                    self._reclaim()
                slot = self.free.pop()
                self.conns[sent % self.workers].send((self.epoch, sent, slot, batches[sent]))
                self.pending.add(slot)
                self.in_flight[sent % self.workers] += 1
                sent += 1
            # Batch n went to worker n % workers, which answers in order: its next answer of this epoch is it.
            while (answer := self._receive(handed % self.workers)) is None:
                pass
            yield self._batch(*answer)

    def _reclaim(self) -> None:
        """No buffer free and none being filled: the training loop holds them, or a reference cycle does."""
        gc.collect()  # a batch in a cycle frees its buffer only when the cycle is collected
        if not self.free:
            raise RuntimeError(
                f"the training loop holds all {len(self.buffers)} of the data loader's batch buffers; keep a copy "
                "of a batch (batch.clone()) rather than the batch, or set data.loader=torch"
            )

    def _receive(self, worker: int) -> tuple[int, int] | None:
        """The worker's next answer: (buffer, rows) for a batch of this epoch, None for one of an earlier epoch."""
        try:
            epoch, _number, slot, rows, error = self.conns[worker].recv()
        except EOFError:  # its end of the pipe closed: it is gone
            process = self.processes[worker]
            process.join(timeout=5)
            self.close()
            raise RuntimeError(
                f"a data loader worker died (exit code {process.exitcode}); if it was killed for lack of memory, "
                "lower data.num_workers or batch_size"
            ) from None
        self.in_flight[worker] -= 1
        self.pending.discard(slot)
        if epoch != self.epoch:  # a batch of an epoch left early: nobody wants it, nor its error
            self.free.append(slot)
            return None
        if error is not None:
            self.free.append(slot)
            raise error
        return slot, rows

    def _batch(self, slot: int, rows: int) -> Any:
        owner = numpy.frombuffer(self.buffers[slot], dtype=numpy.uint8)  # every tensor below keeps it alive
        # The callback holds the free list, not the loader: no reference cycle keeps the loader alive.
        self.owners[slot] = weakref.ref(owner, lambda _, slot=slot, free=self.free: free.append(slot))
        tensors = [field.view(owner, rows) for field in self.layout.fields]
        if self.pin:  # for a CUDA device: page-locked copies, so that the copy to the device is asynchronous
            tensors = [tensor.pin_memory() for tensor in tensors]
        return self.layout.batch(tensors)

    def close(self) -> None:
        """Stop the workers (the next iteration starts new ones)."""
        self.stop()
        atexit.unregister(self.stop)
        self.conns, self.processes, self.in_flight = [], [], [0] * self.workers
        self.free.extend(self.pending)  # batches the workers were making: nobody holds them
        self.pending.clear()


def _stop(conns: list[Connection], processes: list[multiprocessing.process.BaseProcess]) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except OSError:  # it is gone already
            pass
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()
