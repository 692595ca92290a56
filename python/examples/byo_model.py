"""Bring your own model: 3 AdamW steps of a tiny Hugging Face Llama under fp8sim's recorder, then
COAT's per-layer error on its tensors and the memory of its config."""
import sys, tempfile, torch, transformers, fp8sim
from fp8sim.capture import TraceRecorder

torch.manual_seed(0)
cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
model = transformers.LlamaForCausalLM(cfg)  # from the config, no download
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
trace = (sys.argv[1:] or [tempfile.mkdtemp() + "/llama.h5"])[0]
with TraceRecorder(model, opt, trace, steps=[3]):
    for _ in range(3):
        x = torch.randint(0, 256, (2, 64))
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
for L in fp8sim.analyze(trace, "coat")["layers"]:  # GEMM output error per layer (-1: LM head)
    print(f"layer {L['layer']:2d}: GEMM output SNR {L['snr_db']:.1f} dB")
mem = fp8sim.memory(cfg.to_dict(), recipe="coat", batch=2, seq=64)
print(f"{mem['params']:,} parameters, {mem['peak_gib']:.4f} GiB/GPU at peak under coat")
