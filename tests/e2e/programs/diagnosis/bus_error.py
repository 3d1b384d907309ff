"""A DataLoader worker that dies of SIGBUS, as one does when /dev/shm fills up."""
import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset


class Data(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        os.kill(os.getpid(), signal.SIGBUS)
        return torch.zeros(1)


for _ in DataLoader(Data(), num_workers=1):
    pass
