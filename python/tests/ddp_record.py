"""Two CPU processes (torch.distributed, gloo) train a tiny Hugging Face Llama, DDP-wrapped or
sharded with FSDP2's fully_shard, for two steps under fp8sim.capture.TraceRecorder, each rank
writing its own file. Run by test_capture.py::test_ddp_ranks_write_one_file_each and
::test_fsdp_ranks_write_their_shards.

usage: python ddp_record.py OUT_DIR PORT [ddp|fsdp]   (writes OUT_DIR/run.rank0.h5 and run.rank1.h5)
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def worker(rank, out_dir, port, mode):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        import transformers as tf
        from fp8sim.capture import TraceRecorder
        torch.manual_seed(0)  # the same initial weights on both ranks (DDP also broadcasts rank 0's)
        cfg = tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=64, max_position_embeddings=32)
        model = tf.LlamaForCausalLM(cfg)
        if mode == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh("cpu", (WORLD,))
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        else:
            model = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
        with TraceRecorder(model, opt, os.path.join(out_dir, "run.h5"), steps=[2]) as rec:
            for _ in range(2):
                x = torch.randint(0, cfg.vocab_size, (2, 8), generator=g)
                model(input_ids=x, labels=x).loss.backward()
                opt.step()
                rec.step()
                opt.zero_grad()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "ddp"), nprocs=WORLD,
             join=True)
