"""cuda:LOCAL_RANK with more workers than visible GPUs: the last rank asks for a device it does
not see (GPU_ORDINAL_OFFSET shifts the index, to fail on a host with several GPUs too)."""
import os

import torch

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) + int(os.environ.get("GPU_ORDINAL_OFFSET", "0")))
torch.ones(1, device="cuda")
