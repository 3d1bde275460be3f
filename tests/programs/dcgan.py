"""A DCGAN in the common shape of GAN scripts, on torchvision's FakeData: a transposed-
convolution generator and a convolution discriminator with BatchNorm and LeakyReLU,
weights initialized by `apply`, BCELoss against label tensors built with `torch.full`
and `fill_`, two Adam optimizers with beta1 = 0.5, and the discriminator's step on a
detached fake batch before the generator's. Runs unchanged under `python -m fusegrad`
and under PyTorch with torchvision.

Prints `step S loss_D L loss_G L D_x P D_G_z P` each step."""

import argparse

import torch
import torch.nn as nn
import torch.optim as optim
import torchvision.datasets as dset
import torchvision.transforms as transforms
from torch.utils.data import DataLoader


def init_weights(module):
    kind = type(module).__name__
    if "Conv" in kind:
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif "BatchNorm" in kind:
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class Generator(nn.Module):
    def __init__(self, latent, width, channels):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(latent, width * 2, 4, 1, 0, bias=False),  # 4 x 4
            nn.BatchNorm2d(width * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(width * 2, width, 4, 2, 1, bias=False),  # 8 x 8
            nn.BatchNorm2d(width),
            nn.ReLU(True),
            nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False),  # 16 x 16
            nn.Tanh(),
        )

    def forward(self, noise):
        return self.main(noise)


class Discriminator(nn.Module):
    def __init__(self, width, channels):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(channels, width, 4, 2, 1, bias=False),  # 8 x 8
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(width, width * 2, 4, 2, 1, bias=False),  # 4 x 4
            nn.BatchNorm2d(width * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(width * 2, 1, 4, 1, 0, bias=False),  # 1 x 1
            nn.Sigmoid(),
        )

    def forward(self, images):
        return self.main(images).view(-1, 1).squeeze(1)


def main():
    parser = argparse.ArgumentParser(description="DCGAN on FakeData")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--latent", type=int, default=16)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--seed", type=int, default=999)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = dset.FakeData(
        size=args.steps * args.batch_size,
        image_size=(3, 16, 16),
        transform=transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
        ),
    )
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)

    net_g = Generator(args.latent, args.width, 3).to(device)
    net_g.apply(init_weights)
    net_d = Discriminator(args.width, 3).to(device)
    net_d.apply(init_weights)
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    opt_d = optim.Adam(net_d.parameters(), lr=args.lr, betas=(0.5, 0.999))
    opt_g = optim.Adam(net_g.parameters(), lr=args.lr, betas=(0.5, 0.999))

    for step, (real, _) in enumerate(loader):
        # the discriminator: real images towards 1, generated ones towards 0
        net_d.zero_grad()
        real = real.to(device)
        batch = real.size(0)
        label = torch.full((batch,), real_label, dtype=real.dtype, device=device)
        output = net_d(real)
        err_real = criterion(output, label)
        err_real.backward()
        d_x = output.mean().item()

        noise = torch.randn(batch, args.latent, 1, 1, device=device)
        fake = net_g(noise)
        label.fill_(fake_label)
        output = net_d(fake.detach())
        err_fake = criterion(output, label)
        err_fake.backward()
        err_d = err_real + err_fake
        opt_d.step()

        # the generator: its images towards the discriminator's 1
        net_g.zero_grad()
        label.fill_(real_label)
        output = net_d(fake)
        err_g = criterion(output, label)
        err_g.backward()
        d_g_z = output.mean().item()
        opt_g.step()
        print(
            f"step {step} loss_D {err_d.item():.4f} loss_G {err_g.item():.4f} "
            f"D_x {d_x:.4f} D_G_z {d_g_z:.4f}"
        )


if __name__ == "__main__":
    main()
