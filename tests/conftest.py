"""Shared test settings.

One intra-op thread: the tests use small batches, where OpenMP start-up and barriers cost more than they save, and
a 2-core CI machine shared with other processes makes multi-threaded tiny ops orders of magnitude slower.
"""

import torch

torch.set_num_threads(1)
