"""A small MNIST classifier in the shape of most PyTorch training scripts: torchvision's
MNIST with ToTensor and Normalize, a DataLoader, a two-convolution network, Adadelta with
a StepLR schedule, a train loop and a test loop under no_grad. Runs unchanged under
`python -m fusegrad` and under PyTorch with torchvision.

Prints `epoch E train_loss L` and `epoch E test_loss L accuracy A` once an epoch."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adadelta
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Subset
from torchvision import datasets, transforms


class SmallConvNet(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * width * 5 * 5, 10)

    def forward(self, images):
        return F.log_softmax(self.head(torch.flatten(self.features(images), 1)), dim=1)


def first(dataset, count):
    return dataset if count is None else Subset(dataset, range(min(count, len(dataset))))


def main():
    parser = argparse.ArgumentParser(description="MNIST with Adadelta and StepLR")
    parser.add_argument("--data", default="data", help="torchvision's root for MNIST")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--limit", type=int, default=None, help="train on the first N images")
    parser.add_argument("--test-limit", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    prepare = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    train_set = datasets.MNIST(args.data, train=True, download=False, transform=prepare)
    test_set = datasets.MNIST(args.data, train=False, transform=prepare)
    train_loader = DataLoader(
        first(train_set, args.limit), batch_size=args.batch_size, shuffle=True
    )
    test_loader = DataLoader(first(test_set, args.test_limit), batch_size=256)

    model = SmallConvNet().to(device)
    optimizer = Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total, seen = 0.0, 0
        for images, labels in train_loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = F.nll_loss(model(images), labels)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(images)
            seen += len(images)
        print(f"epoch {epoch} train_loss {total / seen:.6f}")

        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for images, labels in test_loader:
                images, labels = images.to(device), labels.to(device)
                output = model(images)
                test_loss += F.nll_loss(output, labels, reduction="sum").item()
                correct += (output.argmax(dim=1) == labels).sum().item()
        count = len(test_loader.dataset)
        print(f"epoch {epoch} test_loss {test_loss / count:.6f} accuracy {correct / count:.4f}")
        scheduler.step()


if __name__ == "__main__":
    main()
