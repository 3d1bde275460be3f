"""torch's KL pairs across families (torch.distributions.kl's), registered with
`register_kl` when distributions.py imports this module.
"""

from __future__ import annotations
