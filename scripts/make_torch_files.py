"""Write the torch.save files tests/frontend/test_torch_files.py reads (needs torch).

Run:  /path/to/python-with-torch scripts/make_torch_files.py tests/frontend/torch_files

The files are small and kept in the repository, so the test needs no torch: what it
checks against (the values, dtypes and the model's output) is written into the test
as literals, printed here.
"""

import os
import sys

import numpy as np
import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.Flatten(), torch.nn.Linear(32, 3)
)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for _ in range(2):
    opt.zero_grad()
    model(torch.ones(2, 1, 6, 6)).sum().backward()
    opt.step()
torch.save(model.state_dict(), f"{out}/state_dict.pt")
base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
torch.save(
    {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 3,
        "dtype": torch.bfloat16,
        "size": torch.Size([2, 3]),
        "device": torch.device("cpu"),
        "mixed": [1, 2.5, "a", None, (True, b"x")],
        "bf16": torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16),
        "f16": torch.tensor([0.5, 65504.0], dtype=torch.float16),
        "i64": torch.tensor([[1, -2], [3, 4]]),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "f64": torch.tensor([1e-300, -0.0], dtype=torch.float64),
        "scalar": torch.tensor(7.25),
        "empty": torch.zeros(0, 3),
        "transposed": base.t(),
        "row": base[1],
        "column": base[:, 2],
        "param": torch.nn.Parameter(torch.tensor([0.25, 0.75])),
        "frozen": torch.nn.Parameter(torch.tensor([1.0]), requires_grad=False),
        "grad_leaf": torch.tensor([2.0], requires_grad=True),
    },
    f"{out}/checkpoint.pt",
)
torch.save(torch.nn.Linear(2, 1), f"{out}/whole_module.pt")
model.eval()
with torch.no_grad():
    y = model(torch.arange(36, dtype=torch.float32).reshape(1, 1, 6, 6) / 36)
np.set_printoptions(precision=17)
print("eval output:", y.tolist())
print("adam state step:", opt.state_dict()["state"][0]["step"], opt.state_dict()["param_groups"][0])
