"""A spectrally normalized GAN in the shape of older GAN scripts, on a ring of eight 2-D
Gaussians: a discriminator whose linear layers are wrapped in the hook-based
`torch.nn.utils.spectral_norm` (weight_orig, weight_u, weight_v), a generator whose layers
use `torch.nn.utils.parametrizations.weight_norm` (and one `spectral_norm`
parametrization), the hinge loss, Adam with betas (0.0, 0.9), the discriminator's step on
a detached fake batch before the generator's, gradient clipping by `get_total_norm` and
`clip_grads_with_norm_`, and a state_dict round trip into fresh networks. Runs unchanged
under `python -m fusegrad` and under PyTorch.

Prints `step S loss_D L loss_G L` each step, then `sigma X` for each spectrally normalized
weight (its largest singular value, near 1) and `reload D` (the largest difference of the
reloaded networks' outputs)."""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations, spectral_norm


def ring(batch, generator):
    """Points of a ring of eight Gaussians (radius 2, deviation 0.05)."""
    k = torch.randint(0, 8, (batch,), generator=generator).float()
    angle = k * (2 * math.pi / 8)
    centers = torch.stack([angle.cos(), angle.sin()], 1) * 2
    return centers + 0.05 * torch.randn(batch, 2, generator=generator)


def generator_net(latent, width):
    return nn.Sequential(
        parametrizations.weight_norm(nn.Linear(latent, width)),
        nn.ReLU(),
        parametrizations.spectral_norm(nn.Linear(width, width)),
        nn.ReLU(),
        parametrizations.weight_norm(nn.Linear(width, 2), dim=None),
    )


def discriminator_net(width):
    return nn.Sequential(
        spectral_norm(nn.Linear(2, width)),
        nn.LeakyReLU(0.2),
        spectral_norm(nn.Linear(width, width)),
        nn.LeakyReLU(0.2),
        spectral_norm(nn.Linear(width, 1)),
    )


def main():
    parser = argparse.ArgumentParser(description="SN-GAN on a ring of Gaussians")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--latent", type=int, default=4)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data_rng = torch.Generator().manual_seed(args.seed)
    net_g, net_d = generator_net(args.latent, args.width), discriminator_net(args.width)
    opt_g = torch.optim.Adam(net_g.parameters(), lr=args.lr, betas=(0.0, 0.9))
    opt_d = torch.optim.Adam(net_d.parameters(), lr=args.lr, betas=(0.0, 0.9))

    for step in range(args.steps):
        real = ring(args.batch_size, data_rng)
        noise = torch.randn(args.batch_size, args.latent)
        fake = net_g(noise)

        opt_d.zero_grad()
        loss_d = F.relu(1 - net_d(real)).mean() + F.relu(1 + net_d(fake.detach())).mean()
        loss_d.backward()
        grads = [p.grad for p in net_d.parameters() if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads)
        torch.nn.utils.clip_grads_with_norm_(net_d.parameters(), 10.0, total)
        opt_d.step()

        opt_g.zero_grad()
        loss_g = -net_d(fake).mean()
        loss_g.backward()
        opt_g.step()
        print(f"step {step} loss_D {loss_d.item():.4f} loss_G {loss_g.item():.4f}")

    net_d.eval()
    for layer in net_d:
        if hasattr(layer, "weight_orig"):
            layer(torch.zeros(1, layer.in_features))  # the hook sets layer.weight
            print(f"sigma {torch.linalg.matrix_norm(layer.weight.detach(), ord=2).item():.4f}")

    fresh_g, fresh_d = generator_net(args.latent, args.width), discriminator_net(args.width)
    fresh_g.load_state_dict(net_g.state_dict())
    fresh_d.load_state_dict(net_d.state_dict())
    fresh_d.eval()
    probe = torch.randn(8, args.latent)
    with torch.no_grad():
        net_g.eval()
        fresh_g.eval()
        before = net_d(net_g(probe))
        after = fresh_d(fresh_g(probe))
    print(f"reload {(before - after).abs().max().item():.6f}")


if __name__ == "__main__":
    main()
