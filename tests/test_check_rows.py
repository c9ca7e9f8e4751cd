"""jobs.check's table from what the tasks report (pure: tests/slurm/test_check.py runs the real check)."""

from jobs.ops.preflight import rows, stack_text

H100 = {"gpu_models": ["NVIDIA H100 80GB HBM3"], "driver": "550.54.15", "cuda": "12.4", "nccl": "2.21.5"}


def fact(rank: int, node: str, stack: dict | None) -> dict:
    return {
        "rank": rank, "node": node, "run_root_error": "", "code_seen": True, "python": "python3",
        "versions": {"torch": "2.14.1"}, "gpus": 1, "cuda_visible_devices": str(rank % 2), "master": "n1:29500",
        "master_ip": "10.0.0.1", "gpu_stack": stack,
        "all_reduce": {"backend": "nccl", "seconds": 0.01, "busbw_gb_s": 80.0, "correct": True},
    }  # fmt: skip


def test_each_node_shows_its_gpu_model_driver_cuda_and_nccl() -> None:
    facts = [fact(0, "n1", H100), fact(1, "n1", H100), fact(2, "n2", {**H100, "driver": "535.104.05"})]
    table = {(r.node, r.check): r for r in rows(facts, 3, 1, {"torch": "2.14.1"}, "")}
    assert (
        table[("n1", "GPU stack")].detail == "NVIDIA H100 80GB HBM3; driver 550.54.15; CUDA 12.4 (torch's); NCCL 2.21.5"
    )
    assert "driver 535.104.05" in table[("n2", "GPU stack")].detail
    assert table[("n1", "all-reduce")].detail.startswith("nccl, 80.00 GB/s")


def test_a_cpu_node_and_tasks_that_disagree_are_shown_as_they_are() -> None:
    assert stack_text([{"gpu_models": [], "driver": "", "cuda": "13.0", "nccl": "2.30.7"}]) == (
        "no GPU; driver -; CUDA 13.0 (torch's); NCCL 2.30.7"
    )
    assert stack_text([H100, {**H100, "nccl": "2.20.3"}]).endswith("NCCL 2.20.3/2.21.5")
    assert stack_text([{}]) == "not reported"  # a task of an older version
    assert stack_text([{"error": "RuntimeError: CUDA driver initialization failed"}]).startswith(
        "not reported (Runtime"
    )


def test_the_driver_version_is_read_from_either_form_of_the_kernel_modules_line() -> None:
    from trainer.entry.preflight import driver_version

    proprietary = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version: gcc 12"
    )
    open_modules = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (root@x)  Mon\n"
    assert driver_version(proprietary) == "550.54.15"
    assert driver_version(open_modules) == "580.159.04"  # the H100 lent here: "for" was read as its driver
    assert driver_version("GCC version: gcc 12.2.0\n") == ""
