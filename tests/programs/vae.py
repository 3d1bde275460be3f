"""A variational autoencoder on MNIST in the common shape of VAE scripts: torchvision's
MNIST with ToTensor, encoder to a mean and a log-variance, the reparameterization trick
with randn_like, a sigmoid decoder, binary cross-entropy summed plus the KL term, Adam;
then a grid of images and their reconstructions written with torchvision's save_image.
Runs unchanged under `python -m fusegrad` and under PyTorch with torchvision.

Prints `epoch E train_loss L` (per image) and `epoch E test_loss L` once an epoch."""

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, Subset
from torchvision import datasets, transforms
from torchvision.utils import save_image


class VAE(nn.Module):
    def __init__(self, hidden=64, latent=8):
        super().__init__()
        self.encoder = nn.Linear(784, hidden)
        self.to_mean = nn.Linear(hidden, latent)
        self.to_logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, 784))

    def forward(self, images):
        hidden = F.relu(self.encoder(images.view(-1, 784)))
        mean, logvar = self.to_mean(hidden), self.to_logvar(hidden)
        code = mean + torch.randn_like(mean) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.decoder(code)), mean, logvar


def vae_loss(reconstruction, images, mean, logvar):
    rebuild = F.binary_cross_entropy(reconstruction, images.view(-1, 784), reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mean.pow(2) - logvar.exp())
    return rebuild + kl


def main():
    parser = argparse.ArgumentParser(description="VAE on MNIST")
    parser.add_argument("--data", default="data")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", default="results", help="folder of the image grids")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set = datasets.MNIST(
        args.data, train=True, download=True, transform=transforms.ToTensor()
    )
    test_set = datasets.MNIST(args.data, train=False, transform=transforms.ToTensor())
    if args.limit is not None:
        train_set = Subset(train_set, range(args.limit))
        test_set = Subset(test_set, range(args.limit // 4))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=args.batch_size)

    model = VAE().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    os.makedirs(args.out, exist_ok=True)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total = 0.0
        for images, _ in train_loader:
            images = images.to(device)
            optimizer.zero_grad()
            reconstruction, mean, logvar = model(images)
            loss = vae_loss(reconstruction, images, mean, logvar)
            loss.backward()
            total += loss.item()
            optimizer.step()
        print(f"epoch {epoch} train_loss {total / len(train_loader.dataset):.4f}")

        model.eval()
        test_total = 0.0
        with torch.no_grad():
            for i, (images, _) in enumerate(test_loader):
                images = images.to(device)
                reconstruction, mean, logvar = model(images)
                test_total += vae_loss(reconstruction, images, mean, logvar).item()
                if i == 0:
                    shown = min(8, images.size(0))
                    pairs = torch.cat([images[:shown], reconstruction.view(-1, 1, 28, 28)[:shown]])
                    save_image(
                        pairs.cpu(),
                        os.path.join(args.out, f"reconstruction_{epoch}.png"),
                        nrow=shown,
                    )
        print(f"epoch {epoch} test_loss {test_total / len(test_loader.dataset):.4f}")


if __name__ == "__main__":
    main()
