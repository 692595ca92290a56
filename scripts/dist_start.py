"""Joins the process group torchrun set up, for the scripts that run under it (measure_step.py
--dist, bench_allgather.py): one GPU per process (cuda:LOCAL_RANK) on NCCL with NVLink multicast
off (NCCL_NVLS_ENABLE=0 unless the environment sets it), or the CPU on gloo."""
import os


def start(device, die):
    """The process's device once the group is up; `die(message, code)` for a rank without its GPU."""
    import torch
    import torch.distributed as dist
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if not torch.cuda.is_available() or local >= torch.cuda.device_count():
            die(f"rank {os.environ.get('RANK', '?')}: no CUDA device {local} (torchrun --nproc_per_node must not "
                "exceed the GPUs on this host; --device cpu runs on gloo)", 2)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
        return dev
    dist.init_process_group("gloo")
    return torch.device("cpu")


def leave(code=0):
    """Ends a rank whose process group is destroyed and whose output is written, without the
    interpreter's finalization: torch's communication threads can abort a process there
    (std::terminate, SIGABRT) after a run that succeeded, and torchrun then fails every rank."""
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # a module of measure_step.py and bench_allgather.py, not a command
    print(__doc__.strip() + "\n\nRun scripts/measure_step.py --help or scripts/bench_allgather.py --help.")
