"""`fusegrad.datasets`: the data the examples train on, and how to read it.

Not part of the tensor library: loaders for the copies of data the project ships
under examples/data (or `$FUSEGRAD_DATA`), used by examples/, benchmarks/ and tests.

- `mnist`: `load_mnist()`, the MNIST digits (examples/lenet_mnist.py);
- `text`: GloVe word vectors, a tokenizer that finds them, and the movie-review
  sentiment task (examples/sentiment.py, examples/char_transformer.py);
- `toy`: MiniTorch's six 2-D toy datasets (examples/toy_datasets.py).

>>> from fusegrad.datasets import toy
>>> len(toy.xor(10, seed=0))
10
"""
