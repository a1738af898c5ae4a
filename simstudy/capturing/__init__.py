"""Real traffic from real training: run a torch.distributed job and capture its packets."""
