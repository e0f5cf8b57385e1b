"""The paper's training protocol (Vaswani et al., 2017, section 5): optimizer, schedule, loss, training loop.

* Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (section 5.3);
* the learning rate ``d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)`` ("Noam" schedule, eq. 3),
  warmup 4000 steps by default, optionally scaled by a ``factor``;
* label smoothing eps_ls = 0.1 (section 5.4) with padding positions ignored;
* batches by token count (built by :func:`companion.data.batching.make_batches`), with gradient accumulation to
  reach the paper's ~25,000 + 25,000 tokens per step on small hardware.

On top of the paper: an optional linear cooldown of the rate to zero at the end of a fixed budget, bf16 autocast on
CUDA (and, opted in, on CPUs with bfloat16 matrix units: ``TrainConfig.cpu_bf16``), optional ``torch.compile``,
optional gradient clipping, a tqdm progress bar, a JSON-lines metrics log, atomic checkpoints
(:mod:`companion.checkpoint`) with exact resume, and several processes through ``torchrun`` +
:class:`~torch.nn.parallel.DistributedDataParallel`.

Distributed training: launch with ``torchrun --nproc_per_node N ...``. Every rank sees the same list of (global)
batches; each rank takes its contiguous share of the rows of every batch, and the loss of every rank is normalised
by the *global* number of target tokens of the optimizer step, so that DDP's gradient averaging yields exactly the
gradient one process would compute on the whole batch.
"""

from .config import TrainConfig
from .loss import label_smoothed_loss
from .schedule import NoamSchedule, cooldown_factor, noam_lr
from .trainer import Trainer, TrainState

__all__ = [
    "noam_lr",
    "NoamSchedule",
    "cooldown_factor",
    "label_smoothed_loss",
    "TrainConfig",
    "Trainer",
    "TrainState",
]
