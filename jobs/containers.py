"""Running the tasks in a container, the two ways Slurm sites do it (pure functions of the profile):

- pyxis/enroot (`container_runtime: pyxis`): srun itself starts each task in the image, with
  `--container-image`, `--container-mounts` and `--container-workdir` (NVIDIA's SPANK plugin);
- Apptainer/Singularity (`container_runtime: apptainer`): each task's command is `apptainer exec [--nv]
  --bind ... IMAGE python ...` (`--nv`, the host's GPU driver, on GPU partitions).

Either way the run root (and so the run's code snapshot under it) is mounted at the same path, with the
profile's `container_mounts`, and the tasks run the container's Python (`python:`, default python3).
"""

from jobs.profiles import Profile, run_root_of
from trainer.errors import UserError


def mounts(profile: Profile) -> list[str]:
    """`src:dst` pairs: the run root at its own path, then the profile's (a bare path: at the same path).
    Both runtimes read `,` between mounts and `:` inside one: a run root holding either is refused, as it
    would mount something else, silently (the profile's own mounts are checked with the profile)."""
    root, box = str(run_root_of(profile)), profile.containers  # as jobs.submit resolves it
    if "," in root or ":" in root:
        raise UserError(
            f"run_root {root} holds {',' if ',' in root else ':'}, which {box.container_runtime} reads as a "
            "separator of its mounts; pick a run_root without , or :"
        )
    return [f"{root}:{root}", *(m if ":" in m else f"{m}:{m}" for m in box.container_mounts)]


def python(profile: Profile, default: str) -> str:
    """The interpreter the tasks run: the container's, unless the profile names one."""
    return profile.environment.python or ("python3" if profile.containers.container_image else default)


def srun_args(profile: Profile, workdir: str | None) -> list[str]:
    """pyxis's srun options; none for Apptainer (it wraps the command instead) or without a container."""
    if not (box := profile.containers).container_image or box.container_runtime != "pyxis":
        return []
    args = [f"--container-image={box.container_image}", f"--container-mounts={','.join(mounts(profile))}"]
    return [*args, f"--container-workdir={workdir}"] if workdir else args


def command_prefix(profile: Profile) -> list[str]:
    """The words before the task's python under Apptainer: `apptainer exec [--nv] --bind ... IMAGE`."""
    if not (box := profile.containers).container_image or box.container_runtime != "apptainer":
        return []
    gpu = ["--nv"] if profile.resources.request_gpus else []
    return [box.apptainer_command, "exec", *gpu, "--bind", ",".join(mounts(profile)), box.container_image]
