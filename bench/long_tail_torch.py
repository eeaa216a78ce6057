# The PyTorch twin of bench_long_tail: sort and topk (k = 100) of 1M f32,
# cumsum and logsumexp over the rows of [4096, 1024] f32, gather of 16384 rows
# of a [100000, 64] table and scatter_add of [16384, 64] gradients back into a
# zero table. Each case runs 3 times to warm up, then REPS times, each timed
# alone (torch.cuda.synchronize on the GPU); one line per case:
#   torch VERSION DEVICE CASE: MEDIAN ms (median of N, min MIN; what was run)
#   python3 bench/long_tail_torch.py [cpu|cuda] [reps (default 20)] [threads]
import statistics
import sys
import time

import torch

dev = sys.argv[1] if len(sys.argv) > 1 else 'cpu'
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
if len(sys.argv) > 3:
    torch.set_num_threads(int(sys.argv[3]))
torch.manual_seed(0)
sync = torch.cuda.synchronize if dev.startswith('cuda') else (lambda: None)

flat = torch.randn(1 << 20, device=dev)
matrix = torch.randn(4096, 1024, device=dev)
table = torch.randn(100000, 64, device=dev)
index = torch.randint(0, 100000, (16384, 1), device=dev).expand(16384, 64).contiguous()
grad = torch.randn(16384, 64, device=dev)
grad_table = torch.zeros(100000, 64, device=dev)

cases = [
    ('sort', '1M f32, values and indices', lambda: torch.sort(flat)),
    ('topk', 'k = 100 of 1M f32', lambda: torch.topk(flat, 100)),
    ('cumsum', '[4096, 1024] f32 along rows', lambda: torch.cumsum(matrix, 1)),
    ('gather', '16384 rows of a [100000, 64] f32 table', lambda: torch.gather(table, 0, index)),
    ('scatter_add', '[16384, 64] f32 into a zero [100000, 64] table',
     lambda: torch.scatter_add(grad_table, 0, index, grad)),
    ('logsumexp', '[4096, 1024] f32 over rows', lambda: torch.logsumexp(matrix, 1)),
]
threads = f'; {torch.get_num_threads()} threads' if dev == 'cpu' else ''
with torch.no_grad():
    for name, what, run in cases:
        for _ in range(3):
            run()
        sync()
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            run()
            sync()
            ms.append((time.perf_counter() - t0) * 1e3)
        print(f'torch {torch.__version__} {dev} {name}: {statistics.median(ms):.4f} ms '
              f'(median of {reps}, min {min(ms):.4f}; {what}{threads})', flush=True)
