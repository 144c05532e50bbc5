"""The test cluster the Slurm benchmarks submit to (lib/slurm/cluster.sh): where its state lives and
whether it answers."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

STATE = Path(os.environ.get("TG_SLURM_DIR", "/tmp/tg-slurm"))
CONF = STATE / "etc" / "job_submit_gate.conf"   # the hook's settings (GATE_DB, TG_GATE_SOCKET, ...)
SOCKET = STATE / "run" / "gate.sock"
ENV = {**os.environ, "SLURM_CONF": str(STATE / "etc" / "slurm.conf")}
NOT_RUNNING = "the test cluster is not running: lib/slurm/cluster.sh start"


def cluster_ready() -> bool:
    """True when the cluster's hook settings exist and slurmctld answers."""
    return CONF.exists() and not subprocess.run(["scontrol", "ping"], env=ENV, capture_output=True).returncode
