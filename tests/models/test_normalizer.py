"""Running statistics equal the statistics of all data seen."""

import torch

from rslkit.models.normalizer import EmpiricalNormalization


def test_running_statistics_match_full_data():
    torch.manual_seed(0)
    norm = EmpiricalNormalization(3)
    batches = [torch.randn(n, 3) * torch.tensor([1.0, 5.0, 0.1]) + 2.0 for n in (10, 200, 33)]
    for b in batches:
        norm.update(b)
    data = torch.cat(batches)
    torch.testing.assert_close(norm.mean, data.mean(0))
    torch.testing.assert_close(norm.var, data.var(0, unbiased=False))
    assert norm.count.item() == data.shape[0]
    y = norm(data)
    torch.testing.assert_close(y.mean(0), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(3), atol=1e-4, rtol=0)
