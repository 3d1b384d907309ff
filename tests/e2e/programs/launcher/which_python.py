"""Launcher scenario worker: writes "<sys.executable> <torch version>" to argv[1]."""
import sys

import torch

with open(sys.argv[1], "w") as f:
    f.write(f"{sys.executable} {torch.__version__}")
