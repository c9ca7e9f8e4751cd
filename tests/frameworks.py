"""Training scripts shaped like users' own, one per framework, none aware of this tool: each records where each
of its starts began (`RUN_DIR/starts`: a line per start of rank 0, `STEP`) and its world as each rank sees it
(`RUN_DIR/world.RANK`), and saves and resumes in its framework's own way. Each runs long enough to be preempted
once it has saved (`saved(run_dir)`) and ends by itself."""

from pathlib import Path

# The DDP tutorial's and nanoGPT's shape: a checkpoint in its output folder every few steps, loaded at start.
PLAIN = """
import os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank, out = dist.get_rank(), os.environ["RUN_DIR"]
ckpt = os.path.join(out, "ckpt.pt")
model, step = DDP(torch.nn.Linear(4, 1)), 0
if os.path.exists(ckpt):
    saved = torch.load(ckpt)
    model.module.load_state_dict(saved["model"])
    step = saved["step"]
open(os.path.join(out, f"world.{rank}"), "a").write(f"{dist.get_world_size()}\\n")
if rank == 0:
    open(os.path.join(out, "starts"), "a").write(f"{step}\\n")
while step < 200:
    model(torch.ones(2, 4)).sum().backward()
    time.sleep(0.05)
    step += 1
    if step % 10 == 0 and rank == 0:
        torch.save({"model": model.module.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
dist.barrier()
dist.destroy_process_group()
"""

# Lightning 2.x as its docs write it, plus the two lines that resume: a ModelCheckpoint in the run directory
# that keeps last.ckpt, and fit(ckpt_path="last") (None the first time: it starts fresh).
LIGHTNING = """
import os, time
import torch
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def on_train_start(self):
        out = os.environ["RUN_DIR"]
        open(os.path.join(out, f"world.{self.global_rank}"), "a").write(f"{self.trainer.world_size}\\n")
        if self.global_rank == 0:
            open(os.path.join(out, "starts"), "a").write(f"{self.global_step}\\n")

    def training_step(self, batch, batch_idx):
        time.sleep(0.05)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    nodes = int(os.environ["WORLD_SIZE"]) // int(os.environ["LOCAL_WORLD_SIZE"])
    every = ModelCheckpoint(dirpath=os.path.join(os.environ["RUN_DIR"], "checkpoints"), save_last=True, every_n_train_steps=10)
    trainer = L.Trainer(
        max_epochs=12, accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]), num_nodes=nodes,
        strategy="ddp", callbacks=[every], enable_progress_bar=False, logger=False,
    )
    data = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=16)
    trainer.fit(Model(), data, ckpt_path="last")
    if trainer.global_rank == 0:
        open(os.path.join(os.environ["RUN_DIR"], "final"), "w").write(f"{trainer.current_epoch} {trainer.global_step}")
"""

# Hugging Face accelerate's own recipe: save_state every few steps, load_state at start.
ACCELERATE = """
import os, time
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator()
out = os.environ["RUN_DIR"]
state = os.path.join(out, "state")
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
model, optimizer, data = accelerator.prepare(model, optimizer, data)
step = 0
if os.path.exists(os.path.join(state, "step.txt")):
    accelerator.load_state(state)
    step = int(open(os.path.join(state, "step.txt")).read())
open(os.path.join(out, f"world.{accelerator.process_index}"), "a").write(f"{accelerator.num_processes}\\n")
if accelerator.is_main_process:
    open(os.path.join(out, "starts"), "a").write(f"{step}\\n")
while step < 200:
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.05)
        step += 1
        if step % 10 == 0:
            accelerator.save_state(state)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                open(os.path.join(state, "step.txt"), "w").write(str(step))
        if step >= 200:
            break
accelerator.wait_for_everyone()
"""

# torchvision's reference scripts' shape (references/classification/train.py): --output-dir, a checkpoint.pth
# each epoch, and --resume PATH that loads it and goes on from the next epoch.
TORCHVISION_REFERENCES = """
import argparse, os, time
import torch, torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--output-dir", required=True)
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--resume", default="")
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
start_epoch = 0
if args.resume:
    checkpoint = torch.load(args.resume, map_location="cpu")
    model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    start_epoch = checkpoint["epoch"] + 1
open(os.path.join(args.output_dir, f"world.{rank}"), "a").write(f"{dist.get_world_size()}\\n")
if rank == 0:
    open(os.path.join(args.output_dir, "starts"), "a").write(f"{start_epoch * 10}\\n")
for epoch in range(start_epoch, args.epochs):
    for _ in range(10):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        time.sleep(0.05)
    if rank == 0:
        checkpoint = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        torch.save(checkpoint, os.path.join(args.output_dir, "checkpoint.pth.tmp"))
        os.replace(os.path.join(args.output_dir, "checkpoint.pth.tmp"), os.path.join(args.output_dir, "checkpoint.pth"))
dist.barrier()
dist.destroy_process_group()
"""

# timm's train.py's shape: --output and --experiment name its folder (a new date-time one each start without
# --experiment), where its CheckpointSaver keeps last.pth.tar (written to tmp.pth.tar, then renamed) and
# checkpoint-EPOCH.pth.tar; --resume PATH goes on from the epoch after the saved one (its version-2 checkpoints).
TIMM = """
import argparse, os, shutil, time
import torch, torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--output", default="")
parser.add_argument("--experiment", default="")
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--resume", default="")
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
start_epoch = 0
if args.resume:
    checkpoint = torch.load(args.resume, map_location="cpu")
    model.module.load_state_dict(checkpoint["state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    start_epoch = checkpoint["epoch"] + (checkpoint.get("version", 1) > 1)
output_dir = os.path.join(args.output or "./output/train", args.experiment or time.strftime("%Y%m%d-%H%M%S"))
os.makedirs(output_dir, exist_ok=True)
run = os.environ["RUN_DIR"]
open(os.path.join(run, f"world.{rank}"), "a").write(f"{dist.get_world_size()}\\n")
if rank == 0:
    open(os.path.join(run, "starts"), "a").write(f"{start_epoch * 10}\\n")
for epoch in range(start_epoch, args.epochs):
    for _ in range(10):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        time.sleep(0.05)
    if rank == 0:
        state = {"epoch": epoch, "arch": "linear", "state_dict": model.module.state_dict(), "version": 2}
        torch.save(state | {"optimizer": optimizer.state_dict()}, os.path.join(output_dir, "tmp.pth.tar"))
        os.replace(os.path.join(output_dir, "tmp.pth.tar"), os.path.join(output_dir, "last.pth.tar"))
        shutil.copyfile(os.path.join(output_dir, "last.pth.tar"), os.path.join(output_dir, f"checkpoint-{epoch}.pth.tar"))
dist.barrier()
dist.destroy_process_group()
"""

# The Hugging Face Trainer's shape (run_clm.py's TrainingArguments): a checkpoint-STEP/ folder in --output_dir
# every --save_steps (model, optimizer, trainer_state.json), resumed with --resume_from_checkpoint FOLDER. Its
# folder is made whole before it is named here (a save cut short would be the newest; the Trainer writes in
# place, so a real one cut short by a kill is a risk of its own). --output_dir is relative: in the working folder.
HF_TRAINER = """
import argparse, json, os, time
import torch, torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", required=True)
parser.add_argument("--max_steps", type=int, default=300)
parser.add_argument("--save_steps", type=int, default=10)
parser.add_argument("--resume_from_checkpoint", default=None)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
global_step = 0
if args.resume_from_checkpoint:
    folder = args.resume_from_checkpoint
    model.module.load_state_dict(torch.load(os.path.join(folder, "pytorch_model.bin")))
    optimizer.load_state_dict(torch.load(os.path.join(folder, "optimizer.pt")))
    global_step = json.load(open(os.path.join(folder, "trainer_state.json")))["global_step"]
run = os.environ["RUN_DIR"]
open(os.path.join(run, f"world.{rank}"), "a").write(f"{dist.get_world_size()}\\n")
if rank == 0:
    open(os.path.join(run, "starts"), "a").write(f"{global_step}\\n")
while global_step < args.max_steps:
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.05)
    global_step += 1
    if global_step % args.save_steps == 0 and rank == 0:
        part = os.path.join(args.output_dir, f"tmp-checkpoint-{global_step}")
        os.makedirs(part, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(part, "pytorch_model.bin"))
        torch.save(optimizer.state_dict(), os.path.join(part, "optimizer.pt"))
        json.dump({"global_step": global_step}, open(os.path.join(part, "trainer_state.json"), "w"))
        os.replace(part, os.path.join(args.output_dir, f"checkpoint-{global_step}"))
dist.barrier()
dist.destroy_process_group()
"""

# name: (file, its text, the words after -- python FILE, the submit's own extra flags, what it saves)
FRAMEWORKS = {
    "plain": ("train.py", PLAIN, [], [], "ckpt.pt"),
    "lightning": ("train_lightning.py", LIGHTNING, [], [], "checkpoints/last.ckpt"),
    "accelerate": ("train_accelerate.py", ACCELERATE, [], [], "state/step.txt"),
    "torchvision-references": (
        "train_classification.py", TORCHVISION_REFERENCES, ["--output-dir", "{RUN_DIR}"],
        ["--restart-args", "--resume {RUN_DIR}/checkpoint.pth"], "checkpoint.pth",
    ),
    "timm": (
        "train_timm.py", TIMM, ["--output", "{RUN_DIR}", "--experiment", "resnet"],
        ["--restart-args", "--resume {RUN_DIR}/resnet/last.pth.tar"], "resnet/last.pth.tar",
    ),
    # Saved once checkpoint-100/ is there: the newest is then checkpoint-100 or later by its number, where by
    # name alone it would be checkpoint-90 (test_frameworks checks it resumed at 100 or later).
    "hf-trainer": (
        "run_clm.py", HF_TRAINER, ["--output_dir", "out"],
        ["--restart-args", "--resume_from_checkpoint {LATEST:out/checkpoint-*}"], "code/out/checkpoint-100",
    ),
}  # fmt: skip


def write(folder: Path, name: str) -> tuple[list[str], list[str]]:
    """The framework's script into `folder`; the command after `--` and the submit's extra flags."""
    file, text, args, flags, _ = FRAMEWORKS[name]
    (folder / file).write_text(text)
    return ["python", file, *args], flags


def saved(run_dir: Path, name: str) -> bool:
    return (run_dir / FRAMEWORKS[name][4]).exists()


def starts(run_dir: Path) -> list[int]:
    path = run_dir / "starts"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def worlds(run_dir: Path, ranks: int) -> list[set[int]]:
    """The world size each rank saw, over its starts."""
    return [{int(w) for w in (run_dir / f"world.{r}").read_text().split()} for r in range(ranks)]
