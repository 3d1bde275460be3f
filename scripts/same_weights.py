"""Real PyTorch programs' models and loops, under PyTorch and under fusegrad from the same
initial weights and data: the loss trajectories must agree (a developer's check, not a test:
it needs torch and the programs' public sources, which the repository does not keep).

    python scripts/same_weights.py --torch-python /path/to/torch/venv/bin/python \\
        --examples /path/to/pytorch-examples [--nanogpt DIR] [--makemore FILE] [NAME ...]

Each check runs twice, in fresh processes: under torch, which saves the model's initial
`state_dict` and the losses (and other numbers the loop prints); then under
`python -m fusegrad`, which loads those weights into its own model and compares. The model
classes and loss functions are the programs' own (imported from their files); each loop
repeats the program's training step with its optimizer, clipping and update spelling, on
small random data drawn by numpy (the same in both), with dropout set to 0 so that no random
stream differs. A relative difference above 1e-3 anywhere is reported with both trajectories.

This found, among others: a hand-written update after `clip_grad_norm_` reading the
unclipped gradient (the word language model), `roll` returning its input (makemore's MLP),
and `Dropout2d` refusing a 2-d input (mnist_rnn).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

# --------------------------------------------------------------- run inside each framework


def _child(name: str, mode: str, out: str, paths: dict) -> None:
    """Run check `name` in this process (torch is torch or fusegrad's stand-in for it)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    stand_ins = ("torchvision", "torchvision.datasets", "torchvision.transforms", "requests")
    for fake in (*stand_ins, "matplotlib", "matplotlib.pyplot"):
        module = types.ModuleType(fake)
        module.use = lambda *a, **k: None
        sys.modules.setdefault(fake, module)
    weights = os.path.join(out, f"{name}.npz")

    def load(path: str, module_name: str):
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def extract(path: str, names: set, namespace: dict) -> dict:
        """The program's classes and functions named `names`, without its module-level
        script (data loading, argument parsing)."""
        tree = ast.parse(open(path).read())
        body = [n for n in tree.body if getattr(n, "name", None) in names]
        exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
        return namespace

    def same_start(model, suffix: str = "") -> None:
        path = weights.replace(".npz", f"{suffix}.npz")
        if mode == "torch":
            np.savez(path, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
        else:
            saved = np.load(path)
            model.load_state_dict({k: torch.from_numpy(saved[k]) for k in saved.files})
        for m in model.modules():
            if isinstance(m, (nn.Dropout, nn.Dropout2d)):
                m.p = 0.0
            if isinstance(getattr(m, "dropout", None), float):  # (attention's, GAT's: a rate)
                m.dropout = 0.0

    rng = np.random.default_rng(0)

    def floats(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))

    def mnist_like(program: str):
        mod = load(os.path.join(paths["examples"], program, "main.py"), "program")
        model = mod.Net()
        same_start(model)
        batches = [
            (floats(16, 1, 28, 28), torch.from_numpy(rng.integers(0, 10, 16))) for _ in range(6)
        ]
        loader = type("Loader", (list,), {"dataset": range(96)})(batches)
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        args = types.SimpleNamespace(log_interval=1, dry_run=False)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for epoch in (1, 2):
                mod.train(args, model, "cpu", loader, opt, epoch)
                sched.step()
        return [
            float(line.split("Loss:")[1])
            for line in printed.getvalue().splitlines()
            if "Loss:" in line
        ]

    def word_lm(kind: str):
        path = os.path.join(paths["examples"], "word_language_model", "model.py")
        mod = load(path, "word_model")
        tokens = 300
        if kind == "Transformer":
            model = mod.TransformerModel(tokens, 32, 2, 64, 2, 0.0)
        else:
            model = mod.RNNModel(kind, tokens, 32, 32, 2, 0.0)
        same_start(model)
        data = torch.from_numpy(rng.integers(0, tokens, (35 * 6 + 1, 8)))
        hidden = None if kind == "Transformer" else model.init_hidden(8)
        losses = []
        for i in range(0, 35 * 6, 35):
            x, y = data[i : i + 35], data[i + 1 : i + 36].reshape(-1)
            model.zero_grad()
            if kind == "Transformer":
                out = model(x).view(-1, tokens)
            else:
                hidden = (
                    tuple(h.detach() for h in hidden)
                    if isinstance(hidden, tuple)
                    else hidden.detach()
                )
                out, hidden = model(x, hidden)
            loss = F.nll_loss(out, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.02)  # (clipping every step)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-20)
            losses.append(loss.item())
        return losses

    def sine_lbfgs():
        mod = load(
            os.path.join(paths["examples"], "time_sequence_prediction", "train.py"), "program"
        )
        x = np.arange(100) + rng.integers(-80, 80, 12).reshape(12, 1)
        data = np.sin(x / 20.0)
        inp, target = torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:])
        seq = mod.Sequence()
        seq.double()
        same_start(seq)
        opt = torch.optim.LBFGS(seq.parameters(), lr=0.8)
        losses = []
        for _ in range(3):

            def closure():
                opt.zero_grad()
                loss = F.mse_loss(seq(inp), target)
                losses.append(loss.item())
                loss.backward()
                return loss

            opt.step(closure)
            with torch.no_grad():
                losses.append(F.mse_loss(seq(inp[:3], future=20)[:, :-20], target[:3]).item())
        return losses

    def vae():
        path = os.path.join(paths["examples"], "vae", "main.py")
        ns = extract(path, {"VAE", "loss_function"}, {"torch": torch, "nn": nn, "F": F})
        model = ns["VAE"]()
        same_start(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(6):
            eps, data = (
                floats(32, 20),
                torch.from_numpy(rng.random((32, 1, 28, 28)).astype(np.float32)),
            )
            model.reparameterize = lambda mu, logvar, eps=eps: mu + eps * torch.exp(0.5 * logvar)
            opt.zero_grad()
            recon, mu, logvar = model(data)
            loss = ns["loss_function"](recon, data, mu, logvar)
            loss.backward()
            losses.append(loss.item())
            opt.step()
        return losses

    def dcgan():
        path = os.path.join(paths["examples"], "dcgan", "main.py")
        ns = extract(path, {"weights_init", "Generator", "Discriminator"},
                     {"torch": torch, "nn": nn, "nz": 16, "ngf": 8, "ndf": 8, "nc": 3})  # fmt: skip
        net_g, net_d = ns["Generator"](1), ns["Discriminator"](1)
        same_start(net_g, "_g")
        same_start(net_d, "_d")
        criterion = nn.BCELoss()
        opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
        out = []
        for _ in range(4):  # the program's step: D on real, then on a detached fake; then G
            real = floats(8, 3, 64, 64)
            net_d.zero_grad()
            label = torch.full((8,), 1, dtype=real.dtype)
            output = net_d(real)
            err_real = criterion(output, label)
            err_real.backward()
            fake = net_g(floats(8, 16, 1, 1))
            label.fill_(0)
            err_fake = criterion(net_d(fake.detach()), label)
            err_fake.backward()
            opt_d.step()
            net_g.zero_grad()
            label.fill_(1)
            err_g = criterion(net_d(fake), label)
            err_g.backward()
            opt_g.step()
            out += [(err_real + err_fake).item(), err_g.item(), output.mean().item()]
        return out

    def gat():
        mod = load(os.path.join(paths["examples"], "gat", "main.py"), "program")
        model = mod.GAT(in_features=12, n_hidden=16, n_heads=4, num_classes=5)
        same_start(model)
        nodes = 40
        features = floats(nodes, 12)
        adjacency = torch.from_numpy((rng.random((nodes, nodes)) < 0.15).astype(np.float32))
        adjacency = ((adjacency + adjacency.T + torch.eye(nodes)) > 0).float()
        labels = torch.from_numpy(rng.integers(0, 5, nodes))
        train, val = torch.arange(0, 25), torch.arange(25, 40)
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        criterion = nn.NLLLoss()
        out = []
        for epoch in range(6):  # the program's own train_iter and test
            with contextlib.redirect_stdout(io.StringIO()):
                mod.train_iter(epoch + 1, model, opt, criterion, (features, adjacency), labels,
                               train, val, print_every=10**6)  # fmt: skip
            out += mod.test(model, criterion, (features, adjacency), labels, val)
        return out

    def super_resolution():
        mod = load(os.path.join(paths["examples"], "super_resolution", "model.py"), "sr_model")
        model = mod.Net(upscale_factor=3)
        same_start(model)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses = []
        for _ in range(5):
            low, high = floats(4, 1, 12, 12), floats(4, 1, 36, 36)
            opt.zero_grad()
            loss = F.mse_loss(model(low), high)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    def nanogpt(accumulate: int, clip: float):
        mod = load(os.path.join(paths["nanogpt"], "model.py"), "nanogpt_model")
        config = mod.GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=2, n_embd=32,
                               dropout=0.0, bias=False)  # fmt: skip
        model = mod.GPT(config)
        same_start(model)
        with contextlib.redirect_stdout(io.StringIO()):
            opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        scaler = torch.cuda.amp.GradScaler(enabled=False)
        data = rng.integers(0, 65, 5000)

        def get_batch():
            starts = rng.integers(0, len(data) - 33, 4)
            x = torch.stack([torch.from_numpy(data[i : i + 32].astype(np.int64)) for i in starts])
            y = torch.stack(
                [torch.from_numpy(data[i + 1 : i + 33].astype(np.int64)) for i in starts]
            )
            return x, y

        x, y = get_batch()
        out = []
        for step in range(5):  # train.py's step: lr per group, accumulation, unscale, clip
            for group in opt.param_groups:
                group["lr"] = 1e-3 * (step + 1) / 5
            for _ in range(accumulate):
                _, loss = model(x, y)
                loss = loss / accumulate
                x, y = get_batch()
                scaler.scale(loss).backward()
            scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            out += [loss.item() * accumulate, float(norm)]
        return out

    def makemore(kind: str):
        sys.argv = sys.argv[:1]
        mod = load(paths["makemore"], "makemore_program")
        config = mod.ModelConfig(
            vocab_size=27, block_size=16, n_layer=2, n_head=2, n_embd=32, n_embd2=32
        )
        if kind in ("rnn", "gru"):
            model = mod.RNN(config, cell_type=kind)
        else:
            model = getattr(mod, {"mlp": "MLP", "bow": "BoW"}.get(kind, kind.title()))(config)
        same_start(model)
        opt = torch.optim.AdamW(
            model.parameters(), lr=5e-4, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
        )
        out = []
        for _ in range(5):
            x = torch.from_numpy(rng.integers(0, 27, (8, 16)))
            y = torch.from_numpy(rng.integers(0, 27, (8, 16)))
            y[:, 12:] = -1
            _, loss = model(x, y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            out.append(loss.item())
        if kind != "bigram":  # (a bigram's near-equal logits tie: topk's pick is torch's own)
            with torch.no_grad():
                out += (
                    mod.generate(model, torch.zeros(2, 1, dtype=torch.long), 10).flatten().tolist()
                )
        return out

    torch.manual_seed(0)
    if name.startswith("word_lm_"):
        kind = name[len("word_lm_") :].upper().replace("TRANSFORMER", "Transformer")
        got = word_lm(kind)
    elif name.startswith("makemore_"):
        got = makemore(name[len("makemore_") :])
    elif name.startswith("nanogpt"):
        got = nanogpt(1, 0.05) if name == "nanogpt_clipping" else nanogpt(2, 1.0)
    elif name.startswith("mnist"):
        got = mnist_like(name)
    else:
        checks = {"sine_lbfgs": sine_lbfgs, "vae": vae, "dcgan": dcgan, "gat": gat}
        got = {**checks, "super_resolution": super_resolution}[name]()
    np.save(os.path.join(out, f"{name}.{mode}.npy"), np.array(got, dtype=np.float64))


# --------------------------------------------------------------- the driver

NEEDS = {"nanogpt": "nanogpt", "makemore": "makemore"}
NAMES = [
    "mnist", "mnist_rnn", "word_lm_lstm", "word_lm_gru", "word_lm_rnn_tanh",
    "word_lm_transformer", "sine_lbfgs", "vae", "dcgan", "gat", "super_resolution",
    "nanogpt", "nanogpt_clipping",
    "makemore_transformer", "makemore_bigram", "makemore_mlp", "makemore_rnn",
    "makemore_gru", "makemore_bow",
]  # fmt: skip


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, name, mode, out, examples, nanogpt, makemore = sys.argv
        _child(name, mode, out, {"examples": examples, "nanogpt": nanogpt, "makemore": makemore})
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"checks to run (default: all): {', '.join(NAMES)}")
    ap.add_argument("--torch-python", required=True, help="a Python that has torch")
    ap.add_argument("--examples", required=True, help="a pytorch/examples checkout")
    ap.add_argument("--nanogpt", default="", help="a karpathy/nanoGPT checkout")
    ap.add_argument("--makemore", default="", help="karpathy/makemore's makemore.py")
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failed = 0
    with tempfile.TemporaryDirectory() as out:
        for name in args.names or NAMES:
            need = next((v for k, v in NEEDS.items() if name.startswith(k)), None)
            if need and not getattr(args, need):
                print(f"{name:22s} skipped: --{need} not given")
                continue
            tail = [name, None, out, args.examples, args.nanogpt, args.makemore]
            runs = {}
            for mode, command in (("torch", [args.torch_python]),
                                  ("fusegrad", [sys.executable, "-m", "fusegrad"])):  # fmt: skip
                tail[1] = mode
                done = subprocess.run([*command, __file__, "--child", *tail], capture_output=True,
                                      text=True, cwd=here, check=False)  # fmt: skip
                if done.returncode != 0:
                    runs = None
                    print(f"{name:22s} {mode} failed:\n{done.stderr[-2000:]}")
                    break
                runs[mode] = np.load(os.path.join(out, f"{name}.{mode}.npy"))
            if runs is None:
                failed += 1
                continue
            want, got = runs["torch"], runs["fusegrad"]
            worst = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-12)))
            ok = got.shape == want.shape and worst < 1e-3
            failed += not ok
            print(
                f"{name:22s} {'same' if ok else 'DIFFERS'}: largest relative difference {worst:.1e}"
            )
            if not ok:
                print(f"  torch    {np.round(want, 5).tolist()}")
                print(f"  fusegrad {np.round(got, 5).tolist()}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
