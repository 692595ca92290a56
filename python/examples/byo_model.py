"""Bring your own model: record 3 AdamW steps of a tiny Hugging Face Llama, print COAT's per-layer error."""
import sys, tempfile, torch, transformers, fp8sim
from fp8sim.capture import TraceRecorder

cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
model = transformers.LlamaForCausalLM(cfg)  # built from the config: nothing is downloaded
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
trace = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/llama.h5"
with TraceRecorder(model, opt, trace, steps=[3]):
    for step in range(3):
        x = torch.randint(0, cfg.vocab_size, (2, 64))
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
for layer in fp8sim.analyze(trace, "coat")["layers"]:  # forward GEMM output error, both operands in FP8
    print(f"layer {layer['layer']:2d}: GEMM output SNR {layer['snr_db']:5.1f} dB, relative error {layer['nmse']:.2e}")
mem = fp8sim.memory(cfg.to_dict(), recipe="coat", batch=2, seq=64)
print(f"{mem['model']['params']:,} parameters; peak {mem['peak_gib']:.4f} GiB/GPU under coat")
