"""A small training loop for the live-plane tests: fits y = 3x by gradient descent, checkpoints every
few steps and on SIGTERM, and resumes from its checkpoint. Prints what it did so tests can read the log.

``train_loop.py STEPS STEP_S [EVERY [HOLD_FILE]]``: with HOLD_FILE, the loop does not finish after its last step
until that file exists (a test says when it may end, instead of guessing how long the run must last)."""

import json
import os
import signal
import sys
import time

total_steps = int(sys.argv[1])
step_s = float(sys.argv[2])
every = int(sys.argv[3]) if len(sys.argv) > 3 else 5
hold = sys.argv[4] if len(sys.argv) > 4 else None
rank = int(os.environ["GPUPLANE_RANK"])
path = os.path.join(os.environ["GPUPLANE_CHECKPOINT_DIR"], f"rank-{rank}.json")
state = {"step": 0, "w": 0.0}
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
print(
    f"rank {rank}/{os.environ['GPUPLANE_WORLD_SIZE']} attempt {os.environ['GPUPLANE_ATTEMPT']} "
    f"resumed_from_step {state['step']} cuda {os.environ.get('CUDA_VISIBLE_DEVICES')} "
    f"node {os.environ['GPUPLANE_NODE']} master {os.environ['MASTER_ADDR']}",
    flush=True,
)
stopping = False


def _stop(_signum, _frame):
    global stopping
    stopping = True


def _save():
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


signal.signal(signal.SIGTERM, _stop)
xs = [0.5, 1.0, 1.5, 2.0]
while state["step"] < total_steps and not stopping:
    grad = sum(2 * (state["w"] * x - 3 * x) * x for x in xs) / len(xs)
    state["w"] -= 0.05 * grad
    state["step"] += 1
    if state["step"] % every == 0:
        _save()
    time.sleep(step_s)
while hold is not None and not stopping and not os.path.exists(hold):
    time.sleep(0.1)
_save()
if stopping:
    print(f"rank {rank} checkpointed at step {state['step']} on SIGTERM", flush=True)
    sys.exit(0)
print(f"rank {rank} finished step {state['step']} w {state['w']:.4f}", flush=True)
