"""Launcher scenario worker: stops in breakpoint(); pdb reads its commands from stdin."""
value = 6
breakpoint()
print(f"after the breakpoint: {value}", flush=True)
