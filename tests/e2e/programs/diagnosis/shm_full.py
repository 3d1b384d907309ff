"""A DataLoader whose batches (1 MiB each) do not fit in /dev/shm: the test mounts a 2 MiB one."""
import torch
from torch.utils.data import DataLoader, Dataset


class Data(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.zeros(256, 1024)


for _ in DataLoader(Data(), batch_size=4, num_workers=2):
    pass
