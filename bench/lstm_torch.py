# The PyTorch twin of bench_lstm: a 2-layer LSTM (input 256, hidden 256), sequence 128, batch 32,
# forward, mean-squared loss, backward; ms per step.
#   python3 bench/lstm_torch.py [cpu|cuda] [steps] [threads]
import sys, time, torch
dev = sys.argv[1] if len(sys.argv) > 1 else 'cpu'
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
if len(sys.argv) > 3: torch.set_num_threads(int(sys.argv[3]))
torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
lstm = torch.nn.LSTM(256, 256, num_layers=2).to(dev)
x = torch.randn(128, 32, 256, device=dev); target = torch.randn(128, 32, 256, device=dev)
def step():
    out, _ = lstm(x); loss = torch.nn.functional.mse_loss(out, target)
    lstm.zero_grad(set_to_none=True); loss.backward(); return loss
sync = torch.cuda.synchronize if dev == 'cuda' else (lambda: None)
for _ in range(3): step()
sync(); t0 = time.perf_counter()
for _ in range(steps): loss = step()
l = loss.item(); dt = (time.perf_counter() - t0) / steps
print(f'torch {torch.__version__} {dev} lstm (2 layers, hidden 256, seq 128, batch 32) forward+backward: '
      f'{dt * 1e3:.2f} ms/step ({32 / dt:.0f} sequences/s), loss {l:.4f}, {torch.get_num_threads()} threads', flush=True)
